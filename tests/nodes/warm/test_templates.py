"""
Tests for :mod:`vmservice.nodes.warm.templates`: one build per key however many
ask, failures remembered for a while, the tmpfs budget, replaced and
collected templates.
"""

from __future__ import annotations

import os
import stat

from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vmservice.nodes.warm.template_files import Template
from vmservice.nodes.warm.template_key import TemplateKey
from vmservice.nodes.warm.templates import RETRY_AFTER, TemplateStore, TemplateUnavailable

MiB = 1024 * 1024
KEY = TemplateKey(image="default", build="/img/default-1", qemu="qemu 7.2", ram_bytes=256 * MiB, vcpus=1,
                  network=False, storage_size=1 << 30)


class _Builds:
    """A build that writes a template's files once the test releases it."""

    def __init__(self) -> None:
        self.started: list[Template] = []
        self.release: list[Deferred[None]] = []
        self.fail: str | None = None

    async def __call__(self, template: Template) -> None:
        self.started.append(template)
        gate: Deferred[None] = Deferred()
        self.release.append(gate)
        await gate
        if self.fail:
            raise RuntimeError(self.fail)
        for path in (template.disk, template.device_state, template.ram_file):
            with open(path, "wb") as f:
                f.write(b"x")


class TemplateStoreTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.root = self.mktemp()
        self.state_dir = os.path.join(self.root, "state")
        self.tmpfs = os.path.join(self.root, "shm")
        self.results: list[str] = []
        self.store = TemplateStore(self.clock, self.state_dir, self.tmpfs, 600 * MiB, self.results.append)
        self.builds = _Builds()

    def get(self, key: TemplateKey = KEY) -> Deferred[Template]:
        return Deferred.fromCoroutine(self.store.get(key, "/img/vmlinux", "/img/initrd", self.builds))

    def built(self, key: TemplateKey = KEY) -> Template:
        d = self.get(key)
        self.builds.release[-1].callback(None)
        return self.successResultOf(d)

    def test_concurrent_asks_share_one_build(self) -> None:
        """Three asks while the build runs: one build, all three get its template; later asks none."""
        asks = [self.get() for _ in range(3)]
        self.assertEqual(len(self.builds.started), 1)
        for d in asks:
            self.assertNoResult(d)
        self.builds.release[0].callback(None)
        templates = [self.successResultOf(d) for d in asks]
        self.assertEqual(len(set(templates)), 1)
        self.assertIs(self.successResultOf(self.get()), templates[0])
        self.assertEqual((self.store.builds, self.results), (1, ["ok"]))

    def test_files_and_places(self) -> None:
        """
        The frozen disk and device state are read-only (to the daemon alone)
        under the state directory; the RAM file in the daemon's tmpfs
        directory (0700), made there 0600 before the build starts QEMU.
        """
        d = self.get()
        [building] = self.builds.started
        info = os.lstat(building.ram_file)
        self.assertEqual((stat.S_ISREG(info.st_mode), stat.S_IMODE(info.st_mode), info.st_size), (True, 0o600, 0))
        self.assertEqual(stat.S_IMODE(os.stat(self.store.ram_directory).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(building.directory).st_mode), 0o700)
        self.builds.release[-1].callback(None)
        template = self.successResultOf(d)
        self.assertTrue(template.disk.startswith(os.path.join(self.state_dir, "templates", KEY.digest() + ".")))
        self.assertEqual(os.stat(template.disk).st_mode & 0o777, 0o400)
        self.assertEqual(os.stat(template.device_state).st_mode & 0o777, 0o400)
        self.assertEqual(os.path.dirname(os.path.dirname(template.ram_file)), self.tmpfs)
        self.assertTrue(os.path.basename(os.path.dirname(template.ram_file)).startswith("vmservice-"))
        other = TemplateStore(self.clock, self.state_dir + "2", self.tmpfs, MiB)
        self.assertNotEqual(other.ram_directory, self.store.ram_directory)

    def test_squatted_ram_directory(self) -> None:
        """
        A RAM directory another user made first (or a link in its place) is
        never used: no build, the create boots cold (``build_failed``), and
        nothing is written there.
        """
        os.makedirs(self.tmpfs)
        os.mkdir(self.store.ram_directory, 0o700)
        os.chown(self.store.ram_directory, 65534, 65534)
        failure = self.failureResultOf(self.get(), TemplateUnavailable)
        self.assertEqual(failure.value.kind, "build_failed")
        self.assertIn("owned by uid 65534", str(failure.value))
        self.assertEqual((self.builds.started, os.listdir(self.store.ram_directory)), ([], []))
        os.rmdir(self.store.ram_directory)
        elsewhere = os.path.join(self.root, "elsewhere")
        os.mkdir(elsewhere, 0o700)
        os.symlink(elsewhere, self.store.ram_directory)
        failure = self.failureResultOf(self.get(), TemplateUnavailable)
        self.assertIn("is a symbolic link", str(failure.value))
        self.assertEqual((self.builds.started, os.listdir(elsewhere)), ([], []))

    def test_build_without_files_fails(self) -> None:
        """A build that ends well but wrote no frozen disk failed: its asks are told, the key is Failed, no files."""

        async def nothing_written(template: Template) -> None:
            self.builds.started.append(template)

        failure = self.failureResultOf(
            Deferred.fromCoroutine(self.store.get(KEY, "/img/vmlinux", "/img/initrd", nothing_written)),
            TemplateUnavailable)
        self.assertEqual(failure.value.kind, "build_failed")
        self.assertEqual(self.results, ["failed"])
        self.assertEqual(os.listdir(os.path.join(self.state_dir, "templates")), [])
        self.failureResultOf(self.get(), TemplateUnavailable)  # remembered: no second build before the retry
        self.assertEqual(len(self.builds.started), 1)

    def test_failed_build_remembered(self) -> None:
        """A failed build fails every ask with its reason, is counted, leaves no files, and is retried only later."""
        self.builds.fail = "the guest did not answer"
        asks = [self.get(), self.get()]
        self.builds.release[0].callback(None)
        for d in asks:
            failure = self.failureResultOf(d, TemplateUnavailable)
            self.assertEqual(failure.value.kind, "build_failed")
            self.assertIn("the guest did not answer", str(failure.value))
        self.assertEqual(self.results, ["failed"])
        self.assertEqual(os.listdir(os.path.join(self.state_dir, "templates")), [])
        self.failureResultOf(self.get(), TemplateUnavailable)
        self.assertEqual(len(self.builds.started), 1)
        self.clock.advance(RETRY_AFTER)
        self.builds.fail = None
        self.built()
        self.assertEqual(len(self.builds.started), 2)

    def test_no_room_not_remembered(self) -> None:
        """
        A build that failed for lack of room in the state directory fails
        its asks, but the next ask builds again at once (the room may be
        back), not only after RETRY_AFTER.
        """
        self.builds.fail = "the template's disk: No space left on device"
        asked = self.get()
        self.builds.release[0].callback(None)
        self.assertIn("No space left on device", str(self.failureResultOf(asked, TemplateUnavailable).value))
        self.assertEqual(os.listdir(os.path.join(self.state_dir, "templates")), [])
        self.builds.fail = None
        self.built()
        self.assertEqual(len(self.builds.started), 2)

    def test_missing_files(self) -> None:
        """A template whose files were removed under the daemon: that ask fails ("missing"), the next builds again."""
        template = self.built()
        os.unlink(template.ram_file)
        failure = self.failureResultOf(self.get(), TemplateUnavailable)
        self.assertEqual(failure.value.kind, "missing")
        self.assertNotEqual(self.built(), template)

    def test_budget(self) -> None:
        """Templates stay within the budget: the least recently used goes; one larger than the budget is refused."""
        first = self.built()
        second = self.built(evolve(KEY, vcpus=2))
        self.clock.advance(1)
        self.successResultOf(self.get())  # the first is used again: the second is the least recently used
        self.built(evolve(KEY, vcpus=3))
        self.assertTrue(os.path.exists(first.ram_file))
        self.assertFalse(os.path.exists(second.ram_file))
        failure = self.failureResultOf(self.get(evolve(KEY, ram_bytes=1024 * MiB)), TemplateUnavailable)
        self.assertEqual(failure.value.kind, "budget")

    def test_replaced_by_a_new_build(self) -> None:
        """A new image build (or QEMU) replaces the template: the old one's RAM file and state go."""
        old = self.built()
        new = self.built(evolve(KEY, build="/img/default-2"))
        self.assertNotEqual(old, new)
        self.assertFalse(os.path.exists(old.ram_file))
        self.assertFalse(os.path.exists(old.device_state))
        self.assertTrue(os.path.exists(old.disk))

    def test_collect_keeps_what_nodes_name(self) -> None:
        """Frozen disks stay while a record names them; others and stray RAM files go; the template in use stays."""
        old = self.built()
        self.store.discard(KEY)
        kept = self.built(evolve(KEY, vcpus=2))
        self.store.discard(evolve(KEY, vcpus=2))
        live = self.built(evolve(KEY, vcpus=3))
        stray = os.path.join(self.store.ram_directory, "earlier-run")
        with open(stray, "w"):
            pass
        self.store.collect({kept.disk})
        self.assertFalse(os.path.exists(old.directory))
        self.assertTrue(os.path.exists(kept.disk))
        self.assertTrue(os.path.exists(live.ram_file))
        self.assertFalse(os.path.exists(stray))
        self.store.collect(set())
        self.assertFalse(os.path.exists(kept.directory))
        self.assertTrue(os.path.exists(live.disk))

    def test_collect_during_a_build_of_the_same_key(self) -> None:
        """An earlier template of a key being built again goes once nothing names it; the build's own files stay."""
        old = self.built()
        self.store.discard(KEY)
        ask = self.get()  # a new build of the same key, under way
        building = [name for name in os.listdir(self.store.directory) if name != os.path.basename(old.directory)]
        self.store.collect(set())
        self.assertFalse(os.path.exists(old.directory))
        self.assertEqual(os.listdir(self.store.directory), building)
        self.builds.release[-1].callback(None)
        self.assertEqual(os.path.basename(self.successResultOf(ask).directory), building[0])

    def test_discard_only_that_one(self) -> None:
        """Discarding a broken template leaves one built since alone."""
        old = self.built()
        self.store.discard(KEY)
        new = self.built()
        self.store.discard(KEY, only=old)
        self.assertIs(self.successResultOf(self.get()), new)

    def test_close(self) -> None:
        """At stop the RAM files go, the frozen disks stay."""
        template = self.built()
        self.store.close()
        self.assertFalse(os.path.exists(template.ram_file))
        self.assertTrue(os.path.exists(template.disk))


class CloseTests(SynchronousTestCase):
    def test_close_cancels_builds(self) -> None:
        """A build under way when the daemon stops is cancelled: its asker is told, its files go."""
        store = TemplateStore(Clock(), self.mktemp(), self.mktemp(), 1 << 30)
        builds = _Builds()
        d = Deferred.fromCoroutine(store.get(KEY, "/k", "/i", builds))
        store.close()
        self.assertEqual(self.failureResultOf(d, TemplateUnavailable).value.kind, "build_failed")
        self.assertTrue(builds.release[0].called)
        self.assertFalse(os.path.exists(builds.started[0].directory))


class TemplateKeyTests(SynchronousTestCase):
    def test_tunnel_ports_in_the_key(self) -> None:
        """
        A key with tunnel ports names another template than one without (whose digest is what a key
        written before the ports existed had), so an old template is never loaded into a VM with them.
        """
        from attrs import asdict, evolve
        import hashlib
        import json

        old = hashlib.sha256(json.dumps({k: v for k, v in asdict(KEY).items() if k not in ("aslr", "vsock",
                                                                                          "tunnel_ports")},
                                        sort_keys=True).encode()).hexdigest()[:12]
        self.assertEqual(KEY.digest(), old)
        ported = evolve(KEY, tunnel_ports=4)
        self.assertNotEqual(ported.digest(), KEY.digest())
        self.assertNotEqual(evolve(KEY, tunnel_ports=2).digest(), ported.digest())
        self.assertFalse(ported.supersedes(KEY))  # a new device set, not a newer build of the same
        self.assertTrue(evolve(ported, build="/img/default-2").supersedes(ported))

