# -*- test-case-name: tests.integration.test_codehost -*-
"""
``codehost_user`` against a real daemon and a real guest: the daemon fetches
``/USER.keys`` from a code host served on 127.0.0.1 by the test, installs what
it publishes as the login user's ``authorized_keys``, and refuses (creating
nothing) when the user publishes no keys, when the site is down or too slow,
and when no code host is configured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image


def _node_dirs(daemon: Daemon) -> list[str]:
    """The node directories in the daemon's state directory."""
    try:
        return sorted(os.listdir(os.path.join(daemon.state_dir, "nodes")))
    except FileNotFoundError:
        return []

#: Seconds the daemon waits for the code host (short: the slow page outlives it).
TIMEOUT = 2


class _CodeHost:
    """
    A code host on 127.0.0.1 in a thread of the test: ``pages`` maps a path
    to ``(status, body)``; ``/slow.keys`` answers only once :attr:`release`
    is set.  Records the paths asked for.
    """

    def __init__(self, pages: dict[str, tuple[int, bytes]], port: int = 0) -> None:
        self.pages = pages
        self.asked: list[str] = []
        self.release = threading.Event()
        host = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                host.asked.append(self.path)
                if self.path == "/slow.keys":
                    host.release.wait(60)
                status, body = host.pages.get(self.path, (404, b"Not Found"))
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # the daemon hung up on the slow page: expected

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class CodehostTests(SharedDaemonTestCase):
    """One daemon whose codehost_url is a code host of the test's; one node made with alice's keys."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.keys = tempfile.mkdtemp(prefix="vms-codehost-", dir="/tmp")
        publics = []
        for name in ("alice-1", "alice-2", "other"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                            os.path.join(cls.keys, name)], check=True)
            with open(os.path.join(cls.keys, f"{name}.pub")) as stream:
                publics.append(stream.read().strip())
        cls.alice, cls.other = publics[:2], publics[2]
        cls.site = _CodeHost({
            "/alice.keys": (200, ("\n".join(cls.alice) + "\n\n").encode()),
            "/carol.keys": (200, b""),
            "/slow.keys": (200, (cls.other + "\n").encode()),
            "/broken.keys": (500, b"Internal Server Error"),
        })
        cls.daemon = Daemon(codehost_url=f"http://127.0.0.1:{cls.site.port}", codehost_timeout=TIMEOUT)
        cls.daemon.start()
        cls.node = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m",
                                   {"codehost_user": "alice", "ssh_keys": [cls.other]}, expect=201)
        # What the node's create asked for: other tests ask the site too, and one replaces it.
        cls.asked_by_create = list(cls.site.asked)

    @classmethod
    def _stop_shared(cls) -> None:
        try:
            super()._stop_shared()
        finally:
            site = getattr(cls, "site", None)
            if site is not None:
                site.stop()
            shutil.rmtree(getattr(cls, "keys", "/nonexistent"), ignore_errors=True)

    def refused(self, body: dict[str, Any], status: int, code: str) -> str:
        """Create with ``body`` answers ``status`` with ``code``, and no node, VM or node directory is left."""
        before = set(self.daemon.nodes())
        answer, _, data = self.daemon.request("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", body)
        error = json.loads(data)
        self.assertEqual((answer, error["code"]), (status, code), data)
        self.assertEqual(set(self.daemon.nodes()), before)
        self.assertEqual(_node_dirs(self.daemon), sorted(before))
        self.assertEqual(len(self.daemon.vm_pids()), len(before))
        message: str = error["error"]
        return message

    def test_keys_installed(self) -> None:
        """The user's published keys (not ssh_keys) are root's authorized_keys in the guest, as fetched."""
        self.assertEqual(self.asked_by_create, ["/alice.keys"])
        code, keys = self.daemon.run(self.node["hostname"], "cat /root/.ssh/authorized_keys")
        self.assertEqual(code, 0)
        self.assertEqual(keys.splitlines(), self.alice)
        self.assertEqual(self.daemon.run(self.node["hostname"], "stat -c %a:%U /root/.ssh/authorized_keys"),
                         (0, "600:root\n"))

    def test_user_without_keys(self) -> None:
        """A user the code host does not know (404), or one who publishes no key: 400, nothing created."""
        self.assertIn("no user 'bob'", self.refused({"codehost_user": "bob"}, 400, "codehost_user_has_no_keys"))
        self.assertIn("publishes no SSH keys", self.refused({"codehost_user": "carol"}, 400,
                                                            "codehost_user_has_no_keys"))
        self.assertEqual(self.site.asked.count("/bob.keys"), 1)

    def test_bad_user_name(self) -> None:
        """A name that cannot be a code-host user is refused before anything is fetched."""
        self.refused({"codehost_user": "../alice"}, 400, "invalid_codehost_user")
        self.assertFalse([path for path in self.site.asked if "alice" in path and path != "/alice.keys"])

    def test_site_failing(self) -> None:
        """A code host that answers 500, or does not answer within codehost_timeout: 502, nothing created."""
        self.assertIn("answered 500", self.refused({"codehost_user": "broken"}, 502, "codehost_bad_answer"))
        message = self.refused({"codehost_user": "slow"}, 502, "codehost_unreachable")
        self.assertIn(f"did not answer within {TIMEOUT} s", message)

    def test_site_down(self) -> None:
        """With the code host stopped: 502 codehost_unreachable, nothing created; it is asked again once it is back."""
        port = self.site.port
        self.site.stop()
        try:
            message = self.refused({"codehost_user": "alice"}, 502, "codehost_unreachable")
            self.assertIn(f"127.0.0.1:{port} cannot be reached", message)
        finally:
            type(self).site = _CodeHost(self.site.pages, port=port)
        self.refused({"codehost_user": "carol"}, 400, "codehost_user_has_no_keys")
        self.assertEqual(self.site.asked, ["/carol.keys"])


class NoCodehostTests(SharedDaemonTestCase):
    """A daemon configured without a code host."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(codehost_url=None)
        cls.daemon.start()

    def test_not_supported(self) -> None:
        """codehost_user is 400 not_supported, and nothing is created."""
        status, _, data = self.daemon.request("POST", "/hostgroup/demo/nodes", {"codehost_user": "alice"})
        self.assertEqual((status, json.loads(data)["code"]), (400, "not_supported"), data)
        self.assertEqual(self.daemon.nodes(), {})
        self.assertEqual(_node_dirs(self.daemon), [])
