"""
Fault injection: the guest agent killed (``kill -9`` of its process, from
another exec in the guest) while it serves an exec, a copy into the guest
and an interactive shell.  busybox init starts it again; each operation
must end with a clear answer within a bound (an error with a code, or the
shell's WebSocket closed), the daemon must reach the new agent by itself,
and the node's QEMU must be the same one (nothing lost, nothing stray,
:func:`tests.integration.faults.settled`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any
from urllib.parse import urlencode

from tests.integration.daemon import SharedGuestTestCase
from tests.integration.faults import (
    Background, WebSocket, agent_back, agent_pid, kill_agent, node_pid, run, settled, upload, wait_until,
)

HOSTNAME = "demo-1"


class AgentKillTests(SharedGuestTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.pid = node_pid(self.daemon, HOSTNAME)
        self.agent = agent_pid(self.daemon, HOSTNAME)

    def recovered(self) -> None:
        """A new agent answers, the node runs on in the same QEMU, and the host is as the nodes say."""
        new = agent_back(self.daemon, HOSTNAME, self.agent)
        self.assertNotEqual(new, self.agent)
        self.assertEqual(node_pid(self.daemon, HOSTNAME), self.pid)
        self.assertEqual(run(self.daemon, HOSTNAME, "echo ok"), (0, "ok\n"))
        settled(self.daemon)

    def assert_error(self, status: int, body: Any, what: str) -> None:
        """An error answer with a code (never a 500 without one)."""
        if status < 400 or not isinstance(body, dict) or body.get("code") in (None, "internal_error"):
            raise AssertionError(f"{what}: {status} {body!r}")

    def test_kill_during_exec(self) -> None:
        """
        A buffered exec whose agent is killed while its process runs is
        answered within a bound as docs/api.md says of an agent channel lost
        mid-run: exit code 255 and an ``error`` that says so, with the output
        so far.
        """
        query = urlencode({"cmd": "echo started; sleep 61", "buffered": "true"})
        running = Background(self.daemon, "POST", f"/vm/{HOSTNAME}/exec?{query}", timeout=90)
        wait_until("the exec to run", lambda: "sleep 61" in run(self.daemon, HOSTNAME, "ps -eo args")[1], 30, 0.2)
        kill_agent(self.daemon, HOSTNAME, self.agent)
        status, body = running.result(60)
        self.assertEqual(status, 200, body)
        assert isinstance(body, dict)
        self.assertEqual((body["stdout"], body["exit_code"]), ("started\n", 255), body)
        self.assertIn("agent", body["error"])
        self.recovered()
        # The command's process outlives the agent that ran it (no one is left to end its group): ended here.
        run(self.daemon, HOSTNAME, "pkill -f 'sleep 61' || true")

    def test_kill_during_upload(self) -> None:
        """
        A copy into the guest whose agent is killed mid-way answers an error
        with a code within a bound; the destination is not there (at most
        the copy's hidden file beside it, which the killed agent could not
        remove).
        """
        payload = os.urandom(96 << 20)
        answer: list[tuple[int, Any]] = []
        thread = threading.Thread(
            target=lambda: answer.append(upload(self.daemon, f"/vm/{HOSTNAME}/cp?path=/root/up.bin", payload, 120)),
            daemon=True)
        thread.start()
        def under_way() -> bool:
            return ".up.bin.vmservice-" in run(self.daemon, HOSTNAME, "ls -a /root")[1] or not thread.is_alive()

        wait_until("the copy to be under way", under_way, 60, 0.05)
        self.assertTrue(thread.is_alive(), f"the copy was over before it could be seen: {answer}")
        kill_agent(self.daemon, HOSTNAME, self.agent)
        thread.join(90)
        self.assertFalse(thread.is_alive(), "the copy was not answered within 90 s of its agent's death")
        status, body = answer[0]
        self.assert_error(status, body, "the copy whose agent was killed")
        self.assertEqual((status, body["code"]), (503, "agent_unavailable"), body)
        self.recovered()
        listing = run(self.daemon, HOSTNAME, "ls -a /root")[1].split()
        self.assertNotIn("up.bin", listing)
        # The killed agent could not remove the copy's hidden file: docs/api.md says a guest that crashes
        # mid-upload may leave one behind.  Only that, and removed here.
        hidden = [name for name in listing if ".vmservice-" in name]
        self.assertTrue(all(name.startswith(".up.bin.vmservice-") for name in hidden), hidden)
        run(self.daemon, HOSTNAME, "rm -f /root/.up.bin.vmservice-*")

    def test_kill_during_shell(self) -> None:
        """A shell whose agent is killed: its WebSocket is closed within a bound."""
        shell = WebSocket(self.daemon, f"/vm/{HOSTNAME}/shell")
        self.addCleanup(shell.close)
        self.assertEqual(shell.status, 101)
        deadline = time.monotonic() + 60
        seen = b""
        while b"#" not in seen and b"$" not in seen:
            self.assertLess(time.monotonic(), deadline, f"no prompt: {seen!r}")
            shell.sock.settimeout(max(0.1, deadline - time.monotonic()))
            seen += shell.frame()[1]
        kill_agent(self.daemon, HOSTNAME, self.agent)
        shown, close = shell.until_closed(60)
        self.assertIsNotNone(close, f"the connection ended without a close frame after {shown!r}")
        self.recovered()
