# -*- test-case-name: tests.integration.test_tokens -*-
"""
Token rotation and the audit log against a real daemon: the token file
read again on SIGHUP and when it changes (a new token valid, a removed one
refused, a broken file refusing every token), and the audit log's lines of
state-changing requests (the token's label, never the token, a secret's
content or a query).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import time

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.daemon import Daemon

OLD = "old-token-0123456789abcdef"
NEW = "new-token-fedcba9876543210"


class RotationTests(SynchronousTestCase):
    """One daemon with auth on and a token file of the operator's."""

    def setUp(self) -> None:
        self.daemon = Daemon()
        self.addCleanup(self.daemon.cleanup)
        self.tokens = os.path.join(self.daemon.root, "tokens")
        self.write(f"{OLD} ci-old\n")
        self.daemon.api["auth"] = {"enabled": True, "token_file": self.tokens}
        self.daemon.start()

    def write(self, text: str) -> None:
        """Replace the token file as an operator's tool would (a new file renamed over it)."""
        with open(self.tokens + ".new", "w") as f:
            f.write(text)
        os.chmod(self.tokens + ".new", 0o600)
        os.replace(self.tokens + ".new", self.tokens)

    def status(self, token: str) -> int:
        return self.daemon.request("GET", "/nodes", headers={"Authorization": f"Bearer {token}"})[0]

    def wait_status(self, token: str, status: int) -> None:
        self.daemon.wait_for(f"{status} for a token", lambda: self.status(token) == status, timeout=30)

    def test_rotation_on_sighup(self) -> None:
        """After SIGHUP both tokens are valid; once the old one is removed (and SIGHUP) it is refused."""
        self.assertEqual((self.status(OLD), self.status(NEW)), (200, 401))
        self.write(f"{OLD} ci-old\n{NEW} ci-new\n")
        assert self.daemon.process is not None
        self.daemon.process.send_signal(signal.SIGHUP)
        self.wait_status(NEW, 200)
        self.assertEqual(self.status(OLD), 200)
        self.write(f"{NEW} ci-new\n")
        self.daemon.process.send_signal(signal.SIGHUP)
        self.wait_status(OLD, 401)
        self.assertEqual(self.status(NEW), 200)
        self.assertIn("API tokens reloaded", self.daemon.log())
        self.assertIsNone(self.daemon.process.poll())

    def test_rotation_on_change(self) -> None:
        """Without a signal, a changed file is read again within seconds: the new token in, the old one out."""
        self.write(f"{NEW} ci-new\n")
        self.wait_status(NEW, 200)
        self.assertEqual(self.status(OLD), 401)

    def test_broken_file_refuses_all(self) -> None:
        """A token file made unsafe (writable by others) leaves no token valid until it is fixed."""
        os.chmod(self.tokens, 0o666)
        self.wait_status(OLD, 401)
        self.assertIn("no API token is valid until the token file is fixed", self.daemon.log())
        os.chmod(self.tokens, 0o600)
        self.wait_status(OLD, 200)


class StartTests(SynchronousTestCase):
    def test_unusable_file_refused_at_start(self) -> None:
        """A token file that does not parse keeps the daemon from starting, with one line that says why."""
        daemon = Daemon()
        self.addCleanup(daemon.cleanup)
        path = os.path.join(daemon.root, "tokens")
        with open(path, "w") as f:
            f.write("short\n")
        os.chmod(path, 0o600)
        daemon.api["auth"] = {"enabled": True, "token_file": path}
        with self.assertRaises(RuntimeError) as raised:
            daemon.start()
        self.assertIn("a token must have at least 16 characters", str(raised.exception))


class AuditTests(SynchronousTestCase):
    """The audit log of a daemon with auth on (its default place, <state_dir>/audit/audit.log)."""

    def setUp(self) -> None:
        self.daemon = Daemon(api={"auth": {"enabled": True}})
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start()
        with open(os.path.join(self.daemon.state_dir, "auth", "token")) as f:
            self.daemon.token = f.read().split()[0]
        self.path = os.path.join(self.daemon.state_dir, "audit", "audit.log")

    def lines(self) -> list[dict[str, object]]:
        with open(self.path, "rb") as f:
            return [json.loads(line) for line in f]

    def test_changes_recorded(self) -> None:
        """
        A secret's create, update and delete, and a refused create, are recorded with their route, target,
        status and the token's digest; reads are not; the secret's content and the token are nowhere in the log.
        """
        content = b"audit-must-never-see-this"
        encoded = base64.b64encode(content).decode()
        self.daemon.json("POST", "/secrets", {"name": "db", "data": encoded}, expect=201)
        self.daemon.json("GET", "/secrets")
        self.daemon.json("PATCH", "/secrets/db", {"data": encoded}, expect=200)
        self.daemon.request("DELETE", "/secrets/db")
        status, _, _ = self.daemon.request("POST", "/secrets", {"name": "x", "data": encoded},
                                           headers={"Authorization": "Bearer wrong-token-0123456789"})
        self.assertEqual(status, 401)
        lines = self.lines()
        self.assertEqual([(line["method"], line["route"], line["target"], line["status"]) for line in lines], [
            ("POST", "/secrets", {}, 201),
            ("PATCH", "/secrets/{secret}", {"secret": "db"}, 200),
            ("DELETE", "/secrets/{secret}", {"secret": "db"}, 200),
            ("POST", "/secrets", {}, 401),
        ])
        self.assertTrue(str(lines[0]["token"]).startswith("sha256:"))
        self.assertIsNone(lines[-1]["token"])
        self.assertEqual(lines[-1]["code"], "unauthorized")
        self.assertTrue(str(lines[0]["peer"]).startswith("127.0.0.1:"))
        with open(self.path, "rb") as f:
            text = f.read()
        assert self.daemon.token is not None
        for secret in (content, encoded.encode(), self.daemon.token.encode()):
            self.assertNotIn(secret, text)
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(self.path)).st_mode), 0o700)

    def test_kept_across_restarts(self) -> None:
        """A restarted daemon appends to the same log."""
        self.daemon.json("POST", "/secrets", {"name": "a", "data": "YQ=="}, expect=201)
        self.daemon.stop()
        started = time.monotonic()
        self.daemon.start()
        self.assertLess(time.monotonic() - started, 60)
        self.daemon.json("POST", "/secrets", {"name": "b", "data": "Yg=="}, expect=201)
        self.assertEqual([line["status"] for line in self.lines()], [201, 201])
