# -*- test-case-name: tests.integration.test_filesystem -*-
"""
Integration tests of ``/vm/{hostname}/fs/*`` against a real guest booted by the
real daemon: every operation and every error status, through the real agent.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

from tests.integration.daemon import SharedGuestTestCase

RFC3339 = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$"


class FilesystemTests(SharedGuestTestCase):
    """One daemon and one guest for every test; each test works under its own directory."""


    def fs(self, method: str, action: str, body: Any = None, **query: Any) -> tuple[int, Any]:
        path = f"/vm/demo-1/fs/{action}"
        if query:
            path += "?" + urlencode(query)
        status, headers, data = self.daemon.request(method, path, body)
        self.assertEqual(headers.get("content-type"), "application/json", data)
        return status, json.loads(data)

    def ok(self, method: str, action: str, body: Any = None, **query: Any) -> Any:
        status, value = self.fs(method, action, body, **query)
        self.assertEqual(status, 200, value)
        return value

    def assertStatus(self, result: tuple[int, Any], status: int, code: str) -> None:
        self.assertEqual(result[0], status, result[1])
        self.assertEqual(result[1]["code"], code, result[1])

    def workdir(self, name: str) -> str:
        """A fresh directory for one test, made through the API."""
        path = f"/tmp/fs-{name}"
        self.fs("DELETE", "remove", path=path, recursive="true")
        self.ok("POST", "mkdir", {"path": path})
        return path

    def test_readdir_root(self) -> None:
        """readdir of / lists etc, usr and proc as directories, sorted, with FsEntry fields."""
        entries = self.ok("GET", "readdir", path="/")
        names = [e["name"] for e in entries]
        self.assertEqual(names, sorted(names))
        by_name = {e["name"]: e for e in entries}
        for name in ("etc", "usr", "proc"):
            self.assertEqual(by_name[name]["type"], "directory")
        for entry in entries:
            self.assertEqual(set(entry), {"name", "type", "size", "mtime", "mode"})
            self.assertRegex(entry["mtime"], RFC3339)
            self.assertRegex(entry["mode"], r"^[0-7]{4}$")

    def test_stat_kinds(self) -> None:
        """stat describes a file, a directory (sticky bit shown) and a symlink (not followed)."""
        passwd = self.ok("GET", "stat", path="/etc/passwd")
        self.assertEqual((passwd["name"], passwd["type"]), ("passwd", "file"))
        self.assertGreater(passwd["size"], 0)
        # /etc/hostname is a link into /run in the default image.
        self.assertEqual(self.ok("GET", "stat", path="/etc/hostname")["type"], "symlink")
        tmp = self.ok("GET", "stat", path="/tmp")
        self.assertEqual((tmp["type"], tmp["mode"]), ("directory", "1777"))
        sh = self.ok("GET", "stat", path="/bin/sh")
        self.assertEqual(sh["type"], "symlink")
        self.assertEqual(self.ok("GET", "stat", path="/")["name"], "/")
        self.assertEqual(self.ok("GET", "stat", path="~")["type"], "directory")

    def test_mkdir(self) -> None:
        """mkdir honours mode exactly; recursive makes parents and accepts an existing directory."""
        base = self.workdir("mkdir")
        made = self.ok("POST", "mkdir", {"path": f"{base}/m", "mode": "0700"})
        self.assertEqual((made["name"], made["type"], made["mode"]), ("m", "directory", "0700"))
        deep = self.ok("POST", "mkdir", {"path": f"{base}/a/b/c", "recursive": True, "mode": "2750"})
        self.assertEqual(deep["mode"], "2750")
        self.assertEqual(self.ok("GET", "stat", path=f"{base}/a")["mode"], "0755")
        again = self.ok("POST", "mkdir", {"path": f"{base}/a/b/c", "recursive": True})
        self.assertEqual(again["mode"], "2750")
        self.assertEqual([e["name"] for e in self.ok("GET", "readdir", path=base)], ["a", "m"])

    def test_mkdir_errors(self) -> None:
        """mkdir: existing 409, missing parent 404, parent a file 400, bad mode 400."""
        base = self.workdir("mkdirerr")
        self.assertStatus(self.fs("POST", "mkdir", {"path": base}), 409, "already_exists")
        self.assertStatus(self.fs("POST", "mkdir", {"path": f"{base}/x/y"}), 404, "not_found")
        self.assertStatus(self.fs("POST", "mkdir", {"path": "/etc/hostname/x"}), 400, "not_a_directory")
        self.assertStatus(self.fs("POST", "mkdir", {"path": "/etc/hostname", "recursive": True}), 409, "already_exists")
        self.assertStatus(self.fs("POST", "mkdir", {"path": f"{base}/z", "mode": "rwx"}), 400, "invalid_mode")
        self.assertStatus(self.fs("POST", "mkdir", {"path": "relative"}), 400, "invalid_path")

    def test_remove(self) -> None:
        """remove: a file, a symlink, an empty dir; a non-empty dir is 409 without recursive, removed with it."""
        base = self.workdir("remove")
        self.ok("POST", "mkdir", {"path": f"{base}/full/inner/deeper", "recursive": True})
        self.ok("POST", "mkdir", {"path": f"{base}/empty"})
        self.assertEqual(self.ok("DELETE", "remove", path=f"{base}/empty")["type"], "directory")
        self.assertStatus(self.fs("DELETE", "remove", path=f"{base}/full"), 409, "directory_not_empty")
        self.assertStatus(self.fs("DELETE", "remove", path=f"{base}/full", recursive="false"), 409, "directory_not_empty")
        self.ok("DELETE", "remove", path=f"{base}/full", recursive="true")
        self.assertStatus(self.fs("GET", "stat", path=f"{base}/full"), 404, "not_found")
        self.assertEqual(self.ok("GET", "readdir", path=base), [])
        self.ok("DELETE", "remove", path=base)

    def test_remove_file_and_symlink(self) -> None:
        """
        remove of a symlink removes the link only; a file goes too, answered with
        its old entry (files of the image, in this disposable guest's overlay).
        """
        link = self.ok("GET", "stat", path="/etc/rmt")
        self.assertEqual(link["type"], "symlink")
        self.assertEqual(self.ok("DELETE", "remove", path="/etc/rmt"), link)
        self.assertStatus(self.fs("GET", "stat", path="/etc/rmt"), 404, "not_found")
        before = self.ok("GET", "stat", path="/etc/e2scrub.conf")
        self.assertEqual(before["type"], "file")
        self.assertEqual(self.ok("DELETE", "remove", path="/etc/e2scrub.conf"), before)
        self.assertNotIn("e2scrub.conf", [e["name"] for e in self.ok("GET", "readdir", path="/etc")])

    def test_errors(self) -> None:
        """Every error status: 400 bad input, readdir of a file, removing /; 404 missing path or VM."""
        self.assertStatus(self.fs("GET", "readdir"), 400, "invalid_path")
        self.assertStatus(self.fs("GET", "readdir", path="etc"), 400, "invalid_path")
        self.assertStatus(self.fs("GET", "readdir", path="/etc/hostname"), 400, "not_a_directory")
        self.assertStatus(self.fs("GET", "readdir", path="/nope"), 404, "not_found")
        self.assertStatus(self.fs("GET", "stat", path="/nope/x"), 404, "not_found")
        self.assertStatus(self.fs("DELETE", "remove", path="/nope"), 404, "not_found")
        self.assertStatus(self.fs("DELETE", "remove", path="/", recursive="true"), 400, "invalid_path")
        self.assertStatus(self.fs("DELETE", "remove", path="/x", recursive="perhaps"), 400, "invalid_query")
        status, _, data = self.daemon.request("GET", "/vm/demo-9/fs/stat?path=/")
        self.assertEqual(status, 404, data)
        self.assertTrue(re.search(rb"node_not_found", data))
