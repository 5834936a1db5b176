"""
Tests for :mod:`vmservice.hypervisors.probe_memory`: the KVM probe's outcome
is remembered under a key of what it depends on, and anything doubtful about
the file means "probe again".
"""

from __future__ import annotations

import json
import os
import stat

from hypothesis import given, settings, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.hypervisors.probe_memory import MAX_SIZE, OUTCOME_FILE, ProbeMemory, probe_key
from vmservice.hypervisors.qemu import AccelChoice

FAILED = AccelChoice("tcg", "the KVM probe failed (no sign of life from the probe guest in 15 s)", lasting=True)


class ProbeKeyTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = self.mktemp()
        os.makedirs(self.dir)
        self.files = {}
        for name in ("kernel", "initrd", "boot_id"):
            path = os.path.join(self.dir, name)
            with open(path, "w") as f:
                f.write(name)
            self.files[name] = path
        self.kvm = os.path.join(self.dir, "kvm")
        open(self.kvm, "w").close()
        self.qemu = "qemu 1"

    def key(self) -> str:
        return probe_key("qemu-system-x86_64", self.files["kernel"], self.files["initrd"], kvm_path=self.kvm,
                         boot_id_path=self.files["boot_id"], qemu_identity=lambda binary: self.qemu)

    def test_stable(self) -> None:
        """Nothing changed: the same key."""
        self.assertEqual(self.key(), self.key())

    def test_each_fact_changes_it(self) -> None:
        """Another boot, a new KVM device node, another QEMU build, another guest kernel: another key."""
        seen = {self.key()}

        def changed() -> None:
            key = self.key()
            self.assertNotIn(key, seen)
            seen.add(key)

        with open(self.files["boot_id"], "w") as f:
            f.write("another boot")
        changed()
        os.unlink(self.kvm)
        changed()
        with open(os.path.join(self.dir, "kvm.new"), "w"):
            pass
        os.rename(os.path.join(self.dir, "kvm.new"), self.kvm)
        changed()
        self.qemu = "qemu 2"
        changed()
        with open(self.files["kernel"], "a") as f:
            f.write("rebuilt")
        changed()
        with open(self.files["initrd"], "a") as f:
            f.write("rebuilt")
        changed()


class ProbeMemoryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = self.mktemp()
        os.makedirs(self.dir, mode=0o700)
        self.memory = ProbeMemory(self.dir, "k1")

    def test_nothing_kept(self) -> None:
        """No file: nothing to recall."""
        self.assertIsNone(self.memory.recall())

    def test_kept_and_recalled(self) -> None:
        """A kept outcome comes back for the same key, saying it is remembered; the file is 0600."""
        self.memory.keep(FAILED, "2026-11-28 12:00:00 UTC")
        choice = self.memory.recall()
        assert choice is not None
        self.assertEqual(choice.accel, "tcg")
        self.assertEqual(
            choice.reason, f"{FAILED.reason} (remembered from the probe of 2026-11-28 12:00:00 UTC)"
        )
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.dir, OUTCOME_FILE)).st_mode), 0o600)

    def test_another_key(self) -> None:
        """An outcome kept under another key (QEMU upgraded, host rebooted...) is not recalled."""
        self.memory.keep(AccelChoice("kvm", "a probe guest booted under KVM", lasting=True), "then")
        self.assertIsNone(ProbeMemory(self.dir, "k2").recall())

    def test_link_not_followed(self) -> None:
        """A link in the file's place is not followed."""
        target = os.path.join(self.dir, "elsewhere")
        ProbeMemory(self.dir, "k1").keep(FAILED, "then")
        os.rename(os.path.join(self.dir, OUTCOME_FILE), target)
        os.symlink(target, os.path.join(self.dir, OUTCOME_FILE))
        self.assertIsNone(self.memory.recall())

    def test_too_large(self) -> None:
        """A file larger than MAX_SIZE is not read as an outcome."""
        with open(os.path.join(self.dir, OUTCOME_FILE), "w") as f:
            f.write('{"key": "k1", "accel": "kvm", "reason": "' + "x" * MAX_SIZE + '", "at": "then"}')
        self.assertIsNone(self.memory.recall())

    def test_long_reason_is_cut(self) -> None:
        """A long reason is kept cut, so the file stays within MAX_SIZE and is recalled."""
        self.memory.keep(AccelChoice("tcg", "y" * 10 * MAX_SIZE, lasting=True), "then")
        choice = self.memory.recall()
        assert choice is not None
        self.assertLess(len(choice.reason), MAX_SIZE)

    @settings(max_examples=200, deadline=None)
    @given(st.one_of(
        st.binary(max_size=300),
        st.dictionaries(st.sampled_from(["key", "accel", "reason", "at"]),
                        st.one_of(st.none(), st.integers(), st.text(max_size=20), st.just("k1"),
                                  st.sampled_from(["kvm", "tcg", "xen"])))
        .map(lambda d: json.dumps(d).encode()),
    ))
    def test_any_content(self, content: bytes) -> None:
        """Whatever the file holds, recall gives a valid outcome of the right key or nothing; it never raises."""
        with open(os.path.join(self.dir, OUTCOME_FILE), "wb") as f:
            f.write(content)
        choice = self.memory.recall()
        if choice is not None:
            self.assertIn(choice.accel, ("kvm", "tcg"))
            self.assertIn('"key": "k1"', content.decode())
