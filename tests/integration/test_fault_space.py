"""
Fault injection: the daemon's state directory full.

The state directory is a small tmpfs of the test's own; a filler file takes
all of it (or all but a little) while an operation runs that must write
there: a create (record, disk), a secret's write, a suspend (its snapshot),
a copy into a guest (its disk's overlay grows on the host: the VM stops on
the write it has no room for), a warm group's template build.  Each must
answer a clear error (507 ``state_dir_full``, never a 500), leave nothing
half-written, and succeed once the filler is removed; and every test ends
with nothing lost, nothing stray and the daemon answering
(:func:`tests.integration.faults.settled`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from typing import Any

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image, processes_under
from tests.integration.faults import StateTmpfs, daemon_log, digest, records, run, settled, stray_files, upload

#: The tmpfs's size: a node's disk, a 256 MiB guest's snapshot and a template, with room to spare.
SIZE = 640 << 20


def error_code(data: bytes) -> str | None:
    """The ``code`` of an ErrorResponse body (``None`` for another body)."""
    try:
        return str(json.loads(data).get("code"))
    except (ValueError, AttributeError):
        return None


class SpaceDaemonTestCase(SharedDaemonTestCase):
    """Tests sharing one daemon whose state directory is a tmpfs of ``SIZE`` bytes (:attr:`space`)."""

    space: StateTmpfs
    groups: list[dict[str, Any]] = [{"name": "demo", "vcpu": 1, "ram_mb": 256, "storage_size": "1G"}]
    #: Bytes left free while the daemon starts (``None``: the whole tmpfs).
    room_at_start: int | None = None
    shm: str

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.shm = tempfile.mkdtemp(prefix="vms-t-", dir="/dev/shm")
        cls.daemon = Daemon(groups=cls.groups, accel="tcg", templates_tmpfs_dir=cls.shm)
        try:
            cls.space = StateTmpfs(cls.daemon, SIZE)
            if cls.room_at_start is not None:
                cls.space.fill(cls.room_at_start)
            cls.daemon.start()
        except BaseException:
            cls._stop_shared()
            raise

    @classmethod
    def _stop_shared(cls) -> None:
        daemon = getattr(cls, "daemon", None)
        try:
            if daemon is not None:
                daemon.stop()
                for pid in daemon.vm_pids():
                    os.kill(pid, 9)
        finally:
            space = getattr(cls, "space", None)
            if space is not None:
                space.unmount()
            if daemon is not None:
                daemon.cleanup()
            shutil.rmtree(getattr(cls, "shm", "/nonexistent"), ignore_errors=True)

    def setUp(self) -> None:
        super().setUp()
        self.addCleanup(self.space.release)

    def create(self, group: str = "demo", expect: int = 201, timeout: str = "3m") -> Any:
        """POST a create with ``wait=agent``; the node is deleted when the test ends."""
        status, _, data = self.daemon.request("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout={timeout}", {},
                                              timeout=300)
        if status != expect:
            raise AssertionError(f"create: {status} {data!r} (expected {expect}); "
                                 f"log:\n{daemon_log(self.daemon)[-3000:]}")
        if status == 201:
            hostname = json.loads(data)["hostname"]
            self.addCleanup(self.delete, group, hostname)
            return hostname
        return json.loads(data)

    def delete(self, group: str, hostname: str) -> None:
        """Delete a node the test made (with the room back first, whatever the test did)."""
        self.space.release()
        self.daemon.request("DELETE", f"/hostgroup/{group}/nodes/{hostname}", timeout=60)

    def assert_full(self, status: int, data: bytes, what: str) -> None:
        """``status`` and ``data`` are the answer 507 state_dir_full."""
        if (status, error_code(data)) != (507, "state_dir_full"):
            raise AssertionError(f"{what}: {status} {data!r}; {self.space.free()} bytes free; "
                                 f"log:\n{daemon_log(self.daemon)[-3000:]}")


class StateDirFullTests(SpaceDaemonTestCase):
    def test_create(self) -> None:
        """
        A create with no room at all, or room for its record and disk but
        not for what the guest then writes: 507 state_dir_full, the node
        removed (no record, directory or QEMU); the same create succeeds
        once the filler is gone.
        """
        # No room at all: the hostname counter cannot be written.  256 KiB: the
        # record and the disk's overlay fit, the guest's first writes do not.
        for room in (0, 256 << 10):
            self.space.fill(room)
            status, _, data = self.daemon.request("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {},
                                                  timeout=180)
            self.assert_full(status, data, f"create with {room} bytes free")
            settled(self.daemon, why=f"after a create with {room} bytes free")
            self.assertEqual(self.daemon.nodes(), {})
        self.space.release()
        hostname = self.create()
        self.assertEqual(run(self.daemon, hostname, "echo ok"), (0, "ok\n"))
        settled(self.daemon)

    def test_secret_write(self) -> None:
        """
        POST /secrets with no room: 507, the secret not listed and no
        temporary file beside the others; a PATCH of an existing one the
        same, its content kept; both succeed once there is room.
        """
        body = {"name": "db-password", "data": base64.b64encode(b"hunter2" * 100).decode()}
        self.daemon.json("POST", "/secrets", {"name": "kept", "data": base64.b64encode(b"old").decode()}, expect=201)
        self.addCleanup(self.daemon.request, "DELETE", "/secrets/kept")
        self.space.fill(0)
        status, _, data = self.daemon.request("POST", "/secrets", body)
        self.assert_full(status, data, "POST /secrets")
        bigger = {"data": base64.b64encode(b"new" * 4096).decode()}
        status, _, data = self.daemon.request("PATCH", "/secrets/kept", bigger)
        self.assert_full(status, data, "PATCH /secrets/kept")
        listed = {s["name"]: s for s in self.daemon.json("GET", "/secrets")}
        self.assertEqual(sorted(listed), ["kept"])
        self.assertEqual(listed["kept"]["size"], 3)
        self.assertEqual(sorted(os.listdir(os.path.join(self.daemon.state_dir, "secrets"))), ["kept.secret"])
        self.space.release()
        self.daemon.json("POST", "/secrets", body, expect=201)
        self.addCleanup(self.daemon.request, "DELETE", "/secrets/db-password")
        self.daemon.json("PATCH", "/secrets/kept", {"data": base64.b64encode(b"new").decode()})
        self.assertEqual(sorted(s["name"] for s in self.daemon.json("GET", "/secrets")), ["db-password", "kept"])
        self.assertEqual(stray_files(self.daemon), [])
        settled(self.daemon)

    def test_suspend(self) -> None:
        """
        A suspend with no room for the record, then with room for it but
        not for the snapshot: 507 each time, the node Running (its guest
        answers), no snapshot or partial file; suspended and restored once
        there is room.
        """
        hostname = self.create()
        for room in (0, 16 << 20):
            self.space.fill(room)
            status, _, data = self.daemon.request("POST", f"/vm/{hostname}/suspend", timeout=180)
            self.assert_full(status, data, f"suspend with {room} bytes free")
            self.assertEqual(self.daemon.nodes()[hostname]["status"], "Running")
            self.assertEqual(records(self.daemon)[hostname]["status"], "Running")
            node_dir = os.path.join(self.daemon.state_dir, "nodes", hostname)
            self.assertEqual([n for n in os.listdir(node_dir) if n.startswith("state.bin")], [])
            self.space.release()
            # The guest may have written to its disk while there was no room (its VM
            # then stopped): a request for its guest lets it run on at once, now there is.
            self.assertEqual(run(self.daemon, hostname, "echo ok"), (0, "ok\n"))
            settled(self.daemon, why=f"after a suspend with {room} bytes free")
        self.daemon.post(f"/vm/{hostname}/suspend")
        self.daemon.post(f"/vm/{hostname}/restore?wait=agent&timeout=2m")
        self.assertEqual(run(self.daemon, hostname, "echo ok"), (0, "ok\n"))
        settled(self.daemon)

    def test_cp_upload(self) -> None:
        """
        A copy into a guest whose disk has no room to grow on the host (its
        VM stops on the write): 507 state_dir_full within a bound, no
        partial file in the guest once it runs again; the same copy succeeds
        once the filler is gone.
        """
        hostname = self.create()
        payload = os.urandom(24 << 20)
        self.space.fill(0)
        status, answer = upload(self.daemon, f"/vm/{hostname}/cp?path=/root/big.bin", payload, timeout=120)
        self.assert_full(status, json.dumps(answer).encode(), "cp upload")
        self.space.release()
        # The first request for its guest lets the VM run on at once and waits for its agent.
        self.assertEqual(run(self.daemon, hostname, "echo ok"), (0, "ok\n"))
        code, listing = run(self.daemon, hostname, "ls -a /root")
        self.assertNotIn("big.bin", listing)
        self.daemon.post(f"/vm/{hostname}/cp?path=/root/big.bin", payload)
        self.assertEqual(run(self.daemon, hostname, "sha256sum /root/big.bin")[1].split()[0], digest(payload))
        settled(self.daemon)


class TemplateBuildTests(SpaceDaemonTestCase):
    """A warm group whose template is built while the state directory has no room."""

    groups = [{"name": "warm", "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "warm_spare": 0}]
    room_at_start = 1 << 20

    def test_template_build(self) -> None:
        """
        The template's build at start finds room for its disk but not for
        what its guest writes: it fails at once (not after its boot
        timeout), leaving no template files or QEMU; a create with no room
        at all is 507 state_dir_full; once the filler is gone a create
        succeeds and the next one is a clone of a template built then.
        """
        self.daemon.wait_for("the template's build to fail for lack of room",
                             lambda: "the template's disk: No space left on device" in daemon_log(self.daemon), 120)
        templates = os.path.join(self.daemon.state_dir, "templates")
        self.daemon.wait_for("no template files", lambda: not os.listdir(templates), 30)
        self.assertEqual(processes_under(templates), [])
        self.space.fill(0)
        status, _, data = self.daemon.request("POST", "/hostgroup/warm/nodes?wait=agent&timeout=2m", {}, timeout=180)
        self.assert_full(status, data, "create of a warm node")
        settled(self.daemon, why="after the refused create")
        self.assertEqual(os.listdir(templates), [])
        self.space.release()
        self.create("warm")
        second = self.create("warm")
        self.assertEqual(run(self.daemon, second, "hostname")[1].strip(), second)
        self.assertIn(f"node {second} cloned", daemon_log(self.daemon))
        self.assertEqual(len(os.listdir(templates)), 1)
        settled(self.daemon)
