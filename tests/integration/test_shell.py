# -*- test-case-name: tests.integration.test_shell -*-
"""
Integration tests of ``GET /vm/{hostname}/shell`` against a real guest booted
by the real daemon, driven through the autobahn client of
:mod:`vmservice.client.shell` (:meth:`vmservice.client.Client.shell`) on the
global reactor: the prompt, ``stty size`` after a resize, ``exit`` ending the
session, SIGHUP on disconnect, two sessions at once beside an exec, the
errors before the upgrade (404, 400, 409 while paused) and a flood of output
to a client that does not read, with the daemon's memory flat; and
``vmctl shell`` in a real terminal (tmux).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Callable

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.integration.daemon import SharedGuestTestCase
from tests.integration.screen import Screen
from vmservice.client import Client
from vmservice.client.shell import ShellError, ShellSession

UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
}


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class ShellTests(SharedGuestTestCase, TestCase):
    """A real shell in ``demo-1`` through the WebSocket."""

    timeout = 600

    def setUp(self) -> None:
        super().setUp()
        self.client = Client(reactor, f"http://127.0.0.1:{self.daemon.port}", self.daemon.token)  # type: ignore[arg-type]
        self.addCleanup(lambda: Deferred.fromCoroutine(self.client.close()))

    async def open(self, **kw: Any) -> tuple[ShellSession, Screen]:
        session = await self.client.shell("demo-1", **kw)
        self.addCleanup(session.abort)
        return session, Screen(session)

    def test_prompt_resize_exit(self) -> Deferred[None]:
        """
        A login shell prompts; ``stty size`` shows the size sent and, after a
        WINDOW_SIZE, the new one; ``exit`` ends the session with SESSION_CLOSE
        and close code 1000.
        """

        async def go() -> None:
            session, screen = await self.open(cwd="/tmp")
            session.resize(80, 24)
            await screen.until(lambda text: b"#" in text or b"$" in text)
            self.assertEqual((await screen.run("stty size")).strip(), "24 80")
            self.assertEqual((await screen.run("pwd; echo $TERM")).split(), ["/tmp", "xterm-256color"])
            session.resize(132, 43)
            self.assertEqual((await screen.run("stty size")).strip(), "43 132")
            session.heartbeat()
            session.write(b"exit 3\r")
            await screen.until(lambda text: False if not screen.ended else True)
            self.assertTrue(session.session_closed)
            self.assertEqual(session.close_code, 1000)

        return Deferred.fromCoroutine(go())

    def test_hangup_on_disconnect(self) -> Deferred[None]:
        """
        A client that drops the connection hangs the shell up: the program in
        the foreground gets SIGHUP (its trap runs) and nothing of the session
        is left running, its background jobs included.
        """

        async def go() -> None:
            session, screen = await self.open()
            session.resize(80, 24)
            tag = os.urandom(4).hex()
            await screen.run(f"sleep 7{tag[:4]}1 & true")
            session.write(
                f"bash -c 'trap \"echo hup > /tmp/hup-{tag}; exit\" HUP; echo LOOP; "
                f"while :; do sleep 0.2; done'\r".encode()
            )
            await screen.until(lambda text: b"LOOP\r\n" in text)
            session.abort()
            out = ""
            for _ in range(100):
                await deferLater(reactor, 0.5, lambda: None)  # type: ignore[arg-type]
                code, out = self.daemon.run(
                    "demo-1", f"cat /tmp/hup-{tag} 2>/dev/null; pgrep -f '[s]leep 7{tag[:4]}1' || true"
                )
                if out.strip() == "hup":
                    break
            self.assertEqual(out.strip(), "hup")

        return Deferred.fromCoroutine(go())

    def test_two_sessions_and_exec(self) -> Deferred[None]:
        """Two shells at once, each with its own terminal and user, beside an exec on the same channel."""

        async def go() -> None:
            first, one = await self.open()
            second, two = await self.open(uid=65534, gid=65534, cwd="/")
            first.resize(100, 30)
            second.resize(90, 20)
            self.assertEqual((await one.run("id -u; stty size")).split(), ["0", "30", "100"])
            self.assertEqual((await two.run("id -u; stty size")).split(), ["65534", "20", "90"])
            self.assertEqual(self.daemon.run("demo-1", "echo side"), (0, "side\n"))
            tty_one, tty_two = (await one.run("tty")).strip(), (await two.run("tty")).strip()
            self.assertNotEqual(tty_one, tty_two)
            first.close()
            second.write(b"exit\r")
            await one.until(lambda text: one.ended)
            await two.until(lambda text: two.ended)
            self.assertEqual((first.close_code, second.close_code), (1000, 1000), (first.close_reason, second.close_reason))

        return Deferred.fromCoroutine(go())

    def test_errors_before_upgrade(self) -> Deferred[None]:
        """Unknown node 404, bad query or not an upgrade 400, a cwd the guest lacks 400: all ErrorResponses."""

        async def go() -> None:
            for path, headers, status, code in (
                ("/vm/nosuch-1/shell", UPGRADE, 404, None),
                ("/vm/demo-1/shell?uid=x", UPGRADE, 400, None),
                ("/vm/demo-1/shell", {}, 400, "websocket_required"),
                ("/vm/demo-1/shell?cwd=/no/such/dir", UPGRADE, 400, None),
            ):
                got, _, body = self.daemon.request("GET", path, headers=headers)
                self.assertEqual(got, status, (path, body))
                answer = json.loads(body)
                self.assertIsInstance(answer["error"], str)
                if code is not None:
                    self.assertEqual(answer["code"], code)
            with self.assertRaises(ShellError) as caught:
                await self.client.shell("demo-1", cwd="/no/such/dir")
            self.assertEqual(caught.exception.status, 400)

        return Deferred.fromCoroutine(go())

    def test_paused_conflict(self) -> Deferred[None]:
        """While the node is paused the upgrade is refused with 409 (code paused)."""

        async def go() -> None:
            status, _, data = self.daemon.request("POST", "/vm/demo-1/pause")
            self.assertEqual(status, 200, data)
            try:
                got, _, body = self.daemon.request("GET", "/vm/demo-1/shell", headers=UPGRADE)
                self.assertEqual((got, json.loads(body)["code"]), (409, "paused"))
                with self.assertRaises(ShellError) as caught:
                    await self.client.shell("demo-1")
                self.assertEqual(caught.exception.status, 409)
            finally:
                status, _, data = self.daemon.request("POST", "/vm/demo-1/resume")
                self.assertEqual(status, 200, data)

        return Deferred.fromCoroutine(go())

    def test_flood_to_slow_client(self) -> Deferred[None]:
        """
        ``yes`` to a client that stops reading is held back: the daemon's RSS
        stays flat; reading again, Ctrl-C and ``exit`` still work.
        """

        async def go() -> None:
            assert self.daemon.process is not None
            pid = self.daemon.process.pid
            session, screen = await self.open()
            session.resize(80, 24)
            await screen.run("true")
            session.write(b"yes\r")
            await screen.until(lambda text: text.count(b"y\r\n") > 1000)
            # Stop reading: the client's queue fills and pauses its socket.
            await deferLater(reactor, 3.0, lambda: None)  # type: ignore[arg-type]
            before = _rss_kib(pid)
            samples = []
            for _ in range(10):
                await deferLater(reactor, 1.0, lambda: None)  # type: ignore[arg-type]
                samples.append(_rss_kib(pid))
            self.assertLess(max(samples) - before, 8 * 1024, (before, samples))
            session.write(b"\x03")
            screen.text = b""
            await screen.until(lambda text: b"^C" in text, timeout=120)
            self.assertEqual((await screen.run("echo after", timeout=120)).strip(), "after")
            session.write(b"exit\r")
            await screen.until(lambda text: screen.ended, timeout=120)
            self.assertEqual(session.close_code, 1000)

        return Deferred.fromCoroutine(go())

    def test_vmctl_shell_in_tmux(self) -> None:
        """
        vmctl shows the remote prompt, the remote ``stty size`` follows the
        tmux window through a resize (SIGWINCH), and ``exit`` ends vmctl with status 0.
        """
        server = f"vmctl-shell-{os.getpid()}-{os.urandom(3).hex()}"
        vmctl = os.path.join(os.path.dirname(sys.executable), "vmctl")
        token = f" --token {self.daemon.token}" if self.daemon.token else ""
        line = f"{vmctl} --url http://127.0.0.1:{self.daemon.port}{token} shell demo-1; echo VMCTL_EXIT=$?; sleep 600"

        def tmux(*args: str) -> str:
            return subprocess.run(["tmux", "-L", server, *args], check=True, capture_output=True,
                                  text=True, timeout=30).stdout

        tmux("new-session", "-d", "-s", "t", "-x", "100", "-y", "30", line)
        self.addCleanup(subprocess.run, ["tmux", "-L", server, "kill-server"], capture_output=True)

        def screen_until(predicate: Callable[[str], bool], timeout: float = 60.0) -> str:
            deadline = time.monotonic() + timeout
            text = ""
            while time.monotonic() < deadline:
                text = tmux("capture-pane", "-p", "-t", "t")
                if predicate(text):
                    return text
                time.sleep(0.3)
            raise AssertionError(f"timed out; pane:\n{text}")

        screen_until(lambda text: re.search(r"[#$] ?$", text, re.M) is not None)
        tmux("send-keys", "-t", "t", "stty size", "Enter")
        screen_until(lambda text: "30 100" in text)
        tmux("resize-window", "-t", "t", "-x", "120", "-y", "40")
        tmux("send-keys", "-t", "t", "clear; stty size", "Enter")
        screen_until(lambda text: "40 120" in text)
        tmux("send-keys", "-t", "t", "exit", "Enter")
        screen_until(lambda text: "VMCTL_EXIT=0" in text)
