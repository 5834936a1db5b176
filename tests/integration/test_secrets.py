# -*- test-case-name: tests.integration.test_secrets -*-
"""
The secrets store against the real daemon and real guests: CRUD over HTTP
with every error status, the store's files on the host, the secrets placed
in a node's ``/run/secrets`` (a tmpfs) with their modes and owners, changes
and deletes reaching a running node, and a restored node getting what
changed while it was suspended.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import time
from typing import Any

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image
from vmservice.guest.secrets import mount_point_type

CONTENT = b"hunter2-s3cr3t\nsecond line\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class SecretsTests(SharedDaemonTestCase):
    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon()
        cls.daemon.start()

    def setUp(self) -> None:
        super().setUp()
        self.addCleanup(self._remove_all)

    def _remove_all(self) -> None:
        for node in self.daemon.json("GET", "/nodes"):
            self.daemon.request("DELETE", f"/hostgroup/{node['hostgroup']}/nodes/{node['hostname']}")
        for secret in self.daemon.json("GET", "/secrets"):
            self.daemon.request("DELETE", f"/secrets/{secret['name']}")

    def send(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, headers, data = self.daemon.request(method, path, body)
        if headers.get("content-type", "").startswith("application/json") and data:
            return status, json.loads(data)
        return status, data

    def assertError(self, result: tuple[int, Any], status: int, code: str) -> None:
        self.assertEqual(result[0], status, result[1])
        self.assertEqual(result[1]["code"], code, result[1])
        self.assertNotIn("hunter2", result[1]["error"])

    def run_in(self, hostname: str, cmd: str) -> str:
        code, out = self.daemon.run(hostname, cmd)
        self.assertEqual(code, 0, (cmd, out))
        return out

    def poll(self, what: str, hostname: str, cmd: str, expected: str, timeout: float = 60.0) -> None:
        """Run ``cmd`` in the node until it prints ``expected`` (bounded by ``timeout``)."""
        self.daemon.wait_for(what, lambda: self.daemon.run(hostname, cmd) == (0, expected), timeout)

    def test_crud_and_every_status(self) -> None:
        """
        201 without a body, the metadata listing, 409, 400 for a bad name and bad base64, 404 for PATCH
        and DELETE of an unknown name, 200 without a body for both; the files are 0600 in a 0700
        directory; no content in the daemon's log; 500 secret_store_failed when the store cannot be used.
        """
        self.assertEqual(self.send("POST", "/secrets", {"name": "db-password", "data": b64(CONTENT),
                                                        "permissions": "0440", "uid": 1000, "gid": 1001}), (201, b""))
        status, listed = self.send("GET", "/secrets")
        self.assertEqual(status, 200)
        [secret] = listed
        self.assertEqual(sorted(secret), ["gid", "mod_time", "modified_at", "name", "permissions", "size", "uid"])
        self.assertEqual((secret["name"], secret["size"], secret["permissions"], secret["uid"], secret["gid"]),
                         ("db-password", len(CONTENT), "0440", 1000, 1001))
        self.assertTrue(secret["mod_time"].endswith("Z"))
        self.assertError(self.send("POST", "/secrets", {"name": "db-password", "data": b64(b"x")}), 409,
                         "secret_exists")
        self.assertError(self.send("POST", "/secrets", {"name": ".profile", "data": b64(b"x")}), 400,
                         "invalid_secret_name")
        self.assertError(self.send("POST", "/secrets", {"name": "a" * 129, "data": b64(b"x")}), 400,
                         "invalid_secret_name")
        self.assertError(self.send("POST", "/secrets", {"name": "other", "data": "hunter2!!"}), 400, "invalid_base64")
        self.assertError(self.send("PATCH", "/secrets/db-password", {"data": "not base64"}), 400, "invalid_base64")
        self.assertError(self.send("PATCH", "/secrets/nope", {"data": b64(b"x")}), 404, "secret_not_found")
        self.assertError(self.send("DELETE", "/secrets/nope"), 404, "secret_not_found")
        self.assertEqual(self.send("PATCH", "/secrets/db-password", {"permissions": "0400"}), (200, b""))
        self.assertEqual(self.send("GET", "/secrets")[1][0]["permissions"], "0400")

        directory = os.path.join(self.daemon.state_dir, "secrets")
        self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o700)
        self.assertEqual(os.listdir(directory), ["db-password.secret"])
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(directory, "db-password.secret")).st_mode), 0o600)
        self.assertIn("db-password", self.daemon.log())
        self.assertNotIn("hunter2", self.daemon.log())

        # A store that cannot be used: its directory replaced by a file.
        os.rename(directory, directory + ".away")
        try:
            with open(directory, "w"):
                pass
            self.assertError(self.send("GET", "/secrets"), 500, "secret_store_failed")
            self.assertError(self.send("POST", "/secrets", {"name": "new", "data": b64(b"x")}), 500,
                             "secret_store_failed")
        finally:
            os.unlink(directory)
            os.rename(directory + ".away", directory)
        self.assertEqual(self.send("DELETE", "/secrets/db-password"), (200, b""))
        self.assertEqual(self.send("GET", "/secrets"), (200, []))

    def test_placed_in_the_guest_and_resynced(self) -> None:
        """
        A node made with secrets has them in /run/secrets, a tmpfs, with their content, mode, uid and
        gid; an unknown name is 400 and makes nothing; a PATCH of content and of attributes reaches the
        running node, a DELETE removes the file, a re-create places it again.
        """
        self.assertEqual(self.send("POST", "/secrets", {"name": "db-password", "data": b64(CONTENT),
                                                        "permissions": "0440", "uid": 1000, "gid": 1001})[0], 201)
        self.assertEqual(self.send("POST", "/secrets", {"name": "api.token", "data": b64(b"tok")})[0], 201)
        self.assertError(self.send("POST", "/hostgroup/demo/nodes", {"secrets": ["db-password", "nope"]}), 400,
                         "unknown_secret")
        self.assertEqual(self.daemon.json("GET", "/nodes"), [])

        created = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m",
                                   {"secrets": ["db-password", "api.token"]}, expect=201)
        host = created["hostname"]
        self.assertEqual(self.run_in(host, "cat /run/secrets/db-password"), CONTENT.decode())
        self.assertEqual(self.run_in(host, "stat -c '%a %u %g' /run/secrets/db-password /run/secrets/api.token"),
                         "440 1000 1001\n600 0 0\n")
        self.assertEqual(self.run_in(host, "ls -a /run/secrets"), ".\n..\napi.token\ndb-password\n")
        self.assertEqual(mount_point_type("/run/secrets", self.run_in(host, "cat /proc/mounts")), "tmpfs")

        self.assertEqual(self.send("PATCH", "/secrets/db-password", {"data": b64(b"rotated")})[0], 200)
        self.poll("the new content in the guest", host, "cat /run/secrets/db-password", "rotated")
        self.assertEqual(self.send("PATCH", "/secrets/api.token", {"permissions": "0400", "uid": 7, "gid": 8})[0],
                         200)
        self.poll("the new mode and owner in the guest", host, "stat -c '%a %u %g' /run/secrets/api.token",
                  "400 7 8\n")
        self.assertEqual(self.send("DELETE", "/secrets/api.token")[0], 200)
        self.poll("the file gone from the guest", host, "ls /run/secrets", "db-password\n")
        self.assertEqual(self.send("POST", "/secrets", {"name": "api.token", "data": b64(b"again")})[0], 201)
        self.poll("the file placed again", host, "cat /run/secrets/api.token", "again")
        # Nothing of it on the node's disk (the root file system): only in the tmpfs.
        self.assertEqual(self.daemon.run(host, "grep -rl rotated /root /etc /var 2>/dev/null; true"), (0, ""))

    def test_restored_node_gets_changes_made_while_suspended(self) -> None:
        """A suspended node keeps its secrets; one changed while it was suspended is current after restore."""
        self.assertEqual(self.send("POST", "/secrets", {"name": "k", "data": b64(b"before")})[0], 201)
        host = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {"secrets": ["k"]},
                                expect=201)["hostname"]
        self.assertEqual(self.run_in(host, "cat /run/secrets/k"), "before")
        self.daemon.post(f"/vm/{host}/suspend")
        self.assertEqual(self.send("PATCH", "/secrets/k", {"data": b64(b"after"), "permissions": "0400"})[0], 200)
        started = time.monotonic()
        self.daemon.post(f"/vm/{host}/restore?wait=agent&timeout=2m")
        self.poll("the secret changed while suspended", host, "cat /run/secrets/k; stat -c ' %a' /run/secrets/k",
                  "after 400\n", timeout=max(30.0, 120.0 - (time.monotonic() - started)))

    def test_content_never_logged(self) -> None:
        """
        A secret's content, unique to this test, never appears in the daemon's log (nor in the node's
        console log), in any form a log line could hold it (the text, its base64, its hex): through its
        create, a node created with it, an update placed again in that running node, the node's suspend
        and restore, and the secret's delete.
        """
        content = f"never-logged-{os.urandom(12).hex()}".encode()
        changed = f"never-logged-too-{os.urandom(12).hex()}".encode()
        self.assertEqual(self.send("POST", "/secrets", {"name": "unlogged", "data": b64(content)})[0], 201)
        host = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {"secrets": ["unlogged"]},
                                expect=201)["hostname"]
        self.assertEqual(self.run_in(host, "cat /run/secrets/unlogged"), content.decode())
        self.assertEqual(self.send("PATCH", "/secrets/unlogged", {"data": b64(changed)})[0], 200)
        self.poll("the new content in the guest", host, "cat /run/secrets/unlogged", changed.decode())
        self.daemon.post(f"/vm/{host}/suspend")
        self.daemon.post(f"/vm/{host}/restore?wait=agent&timeout=2m")
        self.poll("the secret after the restore", host, "cat /run/secrets/unlogged", changed.decode())
        self.assertEqual(self.send("DELETE", "/secrets/unlogged")[0], 200)
        self.poll("the file gone from the guest", host, "ls /run/secrets", "")
        log = self.daemon.log()
        # The log did see all of it.
        for line in ("secret unlogged created", f"placing secret unlogged again in node {host}",
                     f"suspended node {host}", f"restored node {host}", "secret unlogged deleted"):
            self.assertIn(line, log)
        with open(os.path.join(self.daemon.state_dir, "nodes", host, "console.log"), errors="replace") as stream:
            console = stream.read()
        for data in (content, changed):
            for form in (data.decode(), b64(data), data.hex()):
                self.assertNotIn(form, log)
                self.assertNotIn(form, console)
