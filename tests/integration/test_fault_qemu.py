"""
Fault injection: a node's QEMU killed (``SIGKILL``) in the middle of an
operation on it: a suspend (while the snapshot is written), a restore (as its
QEMU starts), a clone's start (as the warm group's QEMU loads the template's
state), a fork (a child's QEMU, and the parent's), and a bulk copy out of the
guest.  Each must end with a clear answer to the client within a bound (an
error with a code, or a connection cut short for a download already under
way), and with nothing lost, nothing stray and the daemon answering
(:func:`tests.integration.faults.settled`).

To hit "during" every time, the QEMU is stopped (``SIGSTOP``) the moment the
operation's mark appears (the snapshot's partial file, the new process) and
then killed: it can do nothing in between.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from typing import Any

from tests.integration.daemon import TemplatesDaemonTestCase
from tests.integration.faults import (
    Background, daemon_log, download_under_way, fork_states, kill, node_pid, qemu_of, run, settled, wait_until,
)

GROUPS: list[dict[str, Any]] = [
    {"name": "w", "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "warm_spare": 0},
    {"name": "p", "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "warm_spare": 0, "persistent": True},
]


def stop_and_kill(pid: int) -> None:
    """Freeze ``pid`` at once (it does nothing more), then kill it."""
    kill(pid, signal.SIGSTOP)
    kill(pid, signal.SIGKILL)


class QemuKillTests(TemplatesDaemonTestCase):
    groups = GROUPS
    settings = {"accel": "tcg"}

    def answered_error(self, request: Background, what: str, timeout: float = 120.0) -> dict[str, Any]:
        """``request``'s answer, which must be an error with a code (not a 500 without one), within ``timeout``."""
        status, body = request.result(timeout)
        if status < 400 or not isinstance(body, dict) or not body.get("code") or body["code"] == "internal_error":
            raise AssertionError(f"{what}: {status} {body!r}; log:\n{daemon_log(self.daemon)[-3000:]}")
        return {"status": status, **body}

    def new_node_dir(self, known: set[str]) -> str | None:
        """A node directory that was not in ``known``, once there is one."""
        found = set(os.listdir(os.path.join(self.daemon.state_dir, "nodes"))) - known
        return sorted(found)[0] if found else None

    def test_kill_during_suspend(self) -> None:
        """
        QEMU killed while the snapshot is written: the suspend answers an
        error (409 not_running or 500 suspend_failed), no snapshot or partial
        file is left; an ephemeral node is gone, a persistent one Stopped and
        relaunched.
        """
        for group in ("w", "p"):
            hostname = self.create_node(group)
            pid = node_pid(self.daemon, hostname)
            assert pid is not None
            partial = os.path.join(self.daemon.state_dir, "nodes", hostname, "state.bin.partial")
            suspend = Background(self.daemon, "POST", f"/vm/{hostname}/suspend")
            wait_until("the snapshot being written", lambda: os.path.exists(partial) or suspend.done, 60, 0.001)
            self.assertFalse(suspend.done, "the suspend was over before its snapshot could be seen")
            stop_and_kill(pid)
            error = self.answered_error(suspend, f"suspend of {hostname} whose QEMU was killed")
            self.assertIn(error["code"], ("not_running", "suspend_failed"), error)
            settled(self.daemon, why=f"after the suspend of {hostname}")
            node = self.daemon.nodes().get(hostname)
            if group == "w":
                self.assertIsNone(node)
            else:
                self.assertEqual(node and node["status"], "Stopped")
                self.daemon.json("POST", f"/vm/{hostname}/relaunch?wait=agent&timeout=3m", expect=200, timeout=240)
                self.assertEqual(run(self.daemon, hostname, "echo ok"), (0, "ok\n"))
                settled(self.daemon)

    def test_kill_during_restore(self) -> None:
        """
        QEMU killed as the restore starts it: an error answer, the node
        Suspended with its snapshot kept, and the next restore continues the
        guest where it was.
        """
        hostname = self.create_node("w")
        self.assertEqual(run(self.daemon, hostname, "echo kept > /tmp/mark; echo ok"), (0, "ok\n"))
        self.daemon.post(f"/vm/{hostname}/suspend")
        restore = Background(self.daemon, "POST", f"/vm/{hostname}/restore?wait=agent&timeout=2m")
        pids = wait_until("the restore's QEMU", lambda: qemu_of(self.daemon, hostname) or restore.done, 60, 0.001)
        self.assertFalse(restore.done, "the restore was over before its QEMU could be seen")
        stop_and_kill(pids[0])
        error = self.answered_error(restore, "restore whose QEMU was killed")
        self.assertIn(error["code"], ("restore_failed", "not_running", "boot_failed"), error)
        settled(self.daemon, why="after the failed restore")
        self.assertEqual(self.daemon.nodes()[hostname]["status"], "Suspended")
        self.daemon.post(f"/vm/{hostname}/restore?wait=agent&timeout=2m")
        self.assertEqual(run(self.daemon, hostname, "cat /tmp/mark"), (0, "kept\n"))
        settled(self.daemon)

    def test_kill_during_clone_load(self) -> None:
        """
        The QEMU of a warm group's new node killed as it loads the
        template's state: the create still answers (the node boots cold) or
        answers an error, within its timeout; nothing of the clone is left.
        """
        self.create_node("w")  # the template is built by now
        known = set(os.listdir(os.path.join(self.daemon.state_dir, "nodes")))
        create = Background(self.daemon, "POST", "/hostgroup/w/nodes?wait=agent&timeout=3m", {}, timeout=240)

        def clone_qemu() -> list[int] | bool:
            name = self.new_node_dir(known)
            return (qemu_of(self.daemon, name) if name else []) or create.done

        pids = wait_until("the clone's QEMU", clone_qemu, 60, 0.001)
        self.assertFalse(create.done, "the create was over before its QEMU could be seen")
        stop_and_kill(pids[0])
        status, body = create.result()
        if status == 201:
            assert isinstance(body, dict)
            hostname = body["hostname"]
            self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/w/nodes/{hostname}")
            self.assertEqual(run(self.daemon, hostname, "hostname")[1].strip(), hostname)
        else:
            self.assertIsInstance(body, dict, body)
            assert isinstance(body, dict)
            self.assertNotEqual(body.get("code", "internal_error"), "internal_error", body)
        settled(self.daemon, why="after the create whose clone was killed")

    def test_kill_during_fork(self) -> None:
        """
        A child's QEMU killed as it loads the parent's state: 500
        fork_failed, every child removed, the parent running on.  Then the
        parent's QEMU killed while it is frozen for its fork: an answer
        within a bound, and the host as the listed nodes say.  No fork state
        file is left in the tmpfs either time.
        """
        parent = self.create_node("w")
        known = set(os.listdir(os.path.join(self.daemon.state_dir, "nodes")))
        fork = Background(self.daemon, "POST", f"/vm/{parent}/fork", {"count": 2}, timeout=240)

        def child_qemu() -> list[int] | bool:
            name = self.new_node_dir(known)
            return (qemu_of(self.daemon, name) if name else []) or fork.done

        pids = wait_until("a child's QEMU", child_qemu, 120, 0.001)
        self.assertFalse(fork.done, "the fork was over before a child's QEMU could be seen")
        stop_and_kill(pids[0])
        error = self.answered_error(fork, "fork whose child was killed", timeout=240)
        self.assertEqual((error["status"], error["code"]), (500, "fork_failed"), error)
        settled(self.daemon, why="after the failed fork")
        self.assertEqual(fork_states(self.daemon, self.shm), [])
        self.assertEqual(sorted(self.daemon.nodes()), [parent])
        self.assertEqual(run(self.daemon, parent, "echo ok"), (0, "ok\n"))

        forks = os.path.join(self.daemon.state_dir, "forks")
        before = set(os.listdir(forks)) if os.path.isdir(forks) else set()
        pid = node_pid(self.daemon, parent)
        assert pid is not None
        fork = Background(self.daemon, "POST", f"/vm/{parent}/fork", {"count": 1}, timeout=240)
        wait_until("the parent frozen for its fork",
                   lambda: (os.path.isdir(forks) and set(os.listdir(forks)) - before) or fork.done, 60, 0.001)
        self.assertFalse(fork.done, "the fork was over before its parent could be seen frozen")
        stop_and_kill(pid)
        status, body = fork.result()
        if status == 201:
            assert isinstance(body, list)
            for child in body:
                self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/w/nodes/{child['hostname']}")
        else:
            self.assertNotEqual(isinstance(body, dict) and body.get("code"), "internal_error", body)
            self.assertTrue(isinstance(body, dict) and body.get("code"), body)
        settled(self.daemon, why="after the fork whose parent was killed")
        self.assertEqual(fork_states(self.daemon, self.shm), [])
        self.assertNotIn(parent, self.daemon.nodes())

    def test_kill_during_download(self) -> None:
        """
        QEMU killed during a bulk copy out of the guest: the download ends
        within a bound, cut short of its Content-Length (never a response
        that looks complete), and the node is gone.
        """
        hostname = self.create_node("w")
        self.assertEqual(run(self.daemon, hostname, "head -c 48M /dev/urandom > /root/big; echo ok"), (0, "ok\n"))
        pid = node_pid(self.daemon, hostname)
        assert pid is not None
        sock, length, body = download_under_way(self.daemon, hostname, "/root/big")
        self.addCleanup(sock.close)
        self.assertEqual(length, 48 << 20)
        stop_and_kill(pid)
        deadline = time.monotonic() + 60
        while True:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError:
                break
            except socket.timeout:
                self.fail(f"the download did not end within 60 s of its QEMU's death ({len(body)} bytes)")
            if not chunk:
                break
            body += chunk
        self.assertLess(len(body), length)
        settled(self.daemon, why="after the download whose QEMU was killed")
        self.assertNotIn(hostname, self.daemon.nodes())
        status, _, data = self.daemon.request("GET", f"/vm/{hostname}")
        self.assertEqual((status, json.loads(data)["code"]), (404, "node_not_found"))
