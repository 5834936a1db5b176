"""
``/vm/{hostname}/cp`` with the copy semantics existing clients use, against
the real daemon and a real guest: every mode (legacy ``binary``/``tar``,
``cp-v1-binary``/``-tar``/``-recursive``), every placement rule of a file and
of a directory, copy-contents merges, ``exclude`` both ways, the
``X-Slicer-Unpacked-Size`` refusal on a small tmpfs (nothing left behind),
``~`` for a uid, the download headers, and the 400 the legacy fallback of
existing clients reads.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import Any, Iterator
from urllib.parse import urlencode

from tests.integration.daemon import SharedGuestTestCase

#: Both media types, as clients send them for a recursive download.
BOTH = "application/octet-stream, application/x-tar"


def tar_of(entries: list[tuple[str, Any]]) -> bytes:
    """An uncompressed tar of ``(name, bytes)`` files and ``(name, None)`` directories (names ending in /)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, value in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if value is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(value), 0o644
                tar.addfile(info, io.BytesIO(value))
    return out.getvalue()


def members(body: bytes) -> dict[str, bytes | None]:
    """The entries of a tar: file contents, ``None`` for directories."""
    found: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        for member in tar.getmembers():
            extracted = tar.extractfile(member) if member.isreg() else None
            found[member.name] = extracted.read() if extracted is not None else None
    return found


def name_of(headers: dict[str, str]) -> str:
    """The decoded ``X-Slicer-Source-Name-Base64`` (checked to be unpadded base64url)."""
    text = headers["x-slicer-source-name-base64"]
    assert "=" not in text and "+" not in text and "/" not in text, text
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


class CopyV1Tests(SharedGuestTestCase):
    """One daemon and one node for every test; each test works below its own directory in the guest."""

    def setUp(self) -> None:
        super().setUp()
        self.root = f"/srv/{self._testMethodName}"
        self.sh(f"rm -rf {self.root} && mkdir -p {self.root}")
        self.addCleanup(self.sh, f"rm -rf {self.root}")

    # -- helpers ------------------------------------------------------------------------

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=300)

    def upload(self, query: dict[str, Any], body: bytes | Iterator[bytes], tar: bool = False,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """POST ``body`` (an iterator is sent chunked); the status and the decoded JSON answer."""
        conn = self.connection()
        try:
            sent = {"Content-Type": "application/x-tar" if tar else "application/octet-stream", **(headers or {})}
            chunked = not isinstance(body, bytes)
            conn.request("POST", f"/vm/demo-1/cp?{urlencode(query, doseq=True)}", body=body, headers=sent,
                         encode_chunked=chunked)
            response = conn.getresponse()
            data = response.read()
            return response.status, json.loads(data) if data else None
        finally:
            conn.close()

    def download(self, query: dict[str, Any], accept: str = "application/octet-stream") -> tuple[int, dict[str, str], bytes]:
        conn = self.connection()
        try:
            conn.request("GET", f"/vm/demo-1/cp?{urlencode(query, doseq=True)}", headers={"Accept": accept})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def v1(self, mode: str, path: str, name: str | None = None, kind: str | None = None, **more: Any) -> dict[str, Any]:
        """The query of a cp-v1 upload as existing clients send it."""
        query: dict[str, Any] = {"path": path, "mode": f"cp-v1-{mode}", "copy_semantics": "cp-v1", "uid": 0,
                                 "gid": 0}
        if name is not None:
            query["source_name"] = name
        if kind is not None:
            query["source_type"] = kind
        query.update(more)
        return query

    def sh(self, command: str) -> dict[str, Any]:
        status, _, data = self.daemon.request(
            "POST", "/vm/demo-1/exec?" + urlencode({"cmd": command, "buffered": "true"}), timeout=300)
        self.assertEqual(status, 200, data)
        return dict(json.loads(data))

    def out(self, command: str) -> str:
        result = self.sh(command)
        self.assertEqual(result["exit_code"], 0, result)
        return str(result["stdout"])

    def tree(self, path: str) -> list[str]:
        """Everything below ``path`` in the guest, relative, sorted (directories end in /), with contents."""
        listing = self.out(f"cd {path} && find . -mindepth 1 | sort")
        found = []
        for line in listing.split("\n"):
            if not line:
                continue
            rel = line[2:]
            if self.sh(f"test -d '{path}/{rel}'")["exit_code"] == 0:
                found.append(rel + "/")
            else:
                found.append(f"{rel}={self.out(f'cat {path}/{rel}')}")
        return found

    # -- uploads: a file ------------------------------------------------------------------

    def test_file_placement(self) -> None:
        """File: into an existing directory as dir/name; over an existing file; to a missing path as that path."""
        r = self.root
        self.sh(f"mkdir {r}/dir && printf old > {r}/file")
        status, answer = self.upload(self.v1("binary", f"{r}/dir", "a.txt", "file"), b"into dir")
        self.assertEqual((status, answer["path"]), (200, f"{r}/dir/a.txt"))
        status, answer = self.upload(self.v1("binary", f"{r}/dir/", "b.txt", "file"), b"into dir/")
        self.assertEqual((status, answer["path"]), (200, f"{r}/dir/b.txt"))
        status, _ = self.upload(self.v1("binary", f"{r}/file", "ignored", "file", permissions="0600"), b"new")
        self.assertEqual(status, 200)
        status, _ = self.upload(self.v1("binary", f"{r}/p/q/new", "ignored", "file"), b"made")
        self.assertEqual(status, 200)
        self.assertEqual(self.tree(r), ["dir/", "dir/a.txt=into dir", "dir/b.txt=into dir/", "file=new", "p/",
                                        "p/q/", "p/q/new=made"])
        self.assertEqual(self.out(f"stat -c %a {r}/file").strip(), "600")

    def test_file_placement_refusals(self) -> None:
        """A missing path ending in / is 400 missing_destination; dir/name being a directory 400; nothing is written."""
        r = self.root
        self.sh(f"mkdir -p {r}/dir/taken")
        status, answer = self.upload(self.v1("binary", f"{r}/missing/", "a", "file"), b"x")
        self.assertEqual((status, answer["code"]), (400, "missing_destination"), answer)
        status, answer = self.upload(self.v1("binary", f"{r}/dir", "taken", "file"), b"x")
        self.assertEqual((status, answer["code"]), (400, "is_a_directory"), answer)
        self.assertEqual(self.tree(r), ["dir/", "dir/taken/"])

    # -- uploads: a directory ---------------------------------------------------------------

    def test_directory_placement(self) -> None:
        """Directory: missing -> created; existing -> dest/name; dest/name existing -> merged; copy-contents -> merged."""
        r = self.root
        archive = tar_of([("a", b"1"), ("sub/", None), ("sub/b", b"2")])
        status, answer = self.upload(self.v1("tar", f"{r}/new", "src", "directory"), archive, tar=True)
        self.assertEqual((status, answer["path"], answer["entries"]), (200, f"{r}/new", 3))
        self.sh(f"mkdir {r}/dest")
        status, answer = self.upload(self.v1("tar", f"{r}/dest", "src", "directory"), archive, tar=True)
        self.assertEqual((status, answer["path"]), (200, f"{r}/dest/src"))
        status, answer = self.upload(self.v1("tar", f"{r}/dest", "src", "directory"),
                                     tar_of([("c", b"3"), ("sub/", None), ("sub/d", b"4")]), tar=True)
        self.assertEqual((status, answer["path"]), (200, f"{r}/dest/src"))
        self.sh(f"mkdir {r}/into && printf keep > {r}/into/keep && printf old > {r}/into/a")
        status, answer = self.upload(self.v1("tar", f"{r}/into", "", "directory", copy_contents="true"), archive,
                                     tar=True)
        self.assertEqual((status, answer["path"]), (200, f"{r}/into"))
        self.assertEqual(self.tree(r), [
            "dest/", "dest/src/", "dest/src/a=1", "dest/src/c=3", "dest/src/sub/", "dest/src/sub/b=2",
            "dest/src/sub/d=4",
            "into/", "into/a=1", "into/keep=keep", "into/sub/", "into/sub/b=2",
            "new/", "new/a=1", "new/sub/", "new/sub/b=2"])
        self.assertEqual(self.out(f"ls -A {r}/dest/src {r}/into | grep -c vmservice || true").strip(), "0")

    def test_directory_placement_refusals(self) -> None:
        """An existing non-directory, or dest/name that is a file, is 400 not_a_directory; nothing is written."""
        r = self.root
        self.sh(f"printf f > {r}/file && mkdir {r}/dest && printf f > {r}/dest/src")
        archive = tar_of([("a", b"1")])
        for path in (f"{r}/file", f"{r}/dest"):
            status, answer = self.upload(self.v1("tar", path, "src", "directory"), archive, tar=True)
            self.assertEqual((status, answer["code"]), (400, "not_a_directory"), answer)
        self.assertEqual(self.tree(r), ["dest/", "dest/src=f", "file=f"])

    def test_refused_archive_leaves_nothing(self) -> None:
        """An unsafe entry after good ones: a new directory is not created, a merge target is unchanged."""
        r = self.root
        self.sh(f"mkdir {r}/into && printf keep > {r}/into/a")
        archive = tar_of([("a", b"replaced"), ("b", b"new"), ("../escape", b"x")])
        status, answer = self.upload(self.v1("tar", f"{r}/p/new", "src", "directory"), archive, tar=True)
        self.assertEqual((status, answer["code"]), (400, "unsafe_entry"))
        status, answer = self.upload(self.v1("tar", f"{r}/into", None, "directory", copy_contents="true"), archive,
                                     tar=True)
        self.assertEqual((status, answer["code"]), (400, "unsafe_entry"))
        self.assertEqual(self.tree(r), ["into/", "into/a=keep"])
        self.assertEqual(self.out(f"ls -A {r}/into"), "a\n")

    def test_recursive_upload_and_chunked_body(self) -> None:
        """cp-v1-recursive uploads by source_type; a chunked body (as Go sends) works."""
        r = self.root
        chunks = iter([tar_of([("x", b"chunked")])[:700], tar_of([("x", b"chunked")])[700:]])
        status, answer = self.upload(self.v1("recursive", f"{r}/d", "d", "directory"), chunks, tar=True)
        self.assertEqual((status, answer["mode"]), (200, "tar"), answer)
        status, answer = self.upload(self.v1("recursive", f"{r}/f", "f", "file"), iter([b"a", b"b"]))
        self.assertEqual((status, answer["mode"]), (200, "binary"), answer)
        self.assertEqual(self.tree(r), ["d/", "d/x=chunked", "f=ab"])

    # -- downloads --------------------------------------------------------------------------

    def test_download_modes_and_headers(self) -> None:
        """Every mode on a file and a directory: the body's form, the type/name/mode headers, the refusals."""
        r = self.root
        self.sh(f"mkdir -p {r}/dir/sub && printf hello > {r}/dir/sub/f && chmod 0640 {r}/dir/sub/f"
                f" && printf x > '{r}/dir/n?>~' && chmod 0751 {r}/dir")
        f, d = f"{r}/dir/sub/f", f"{r}/dir"
        for mode in ("cp-v1-binary", "cp-v1-recursive", "binary"):
            status, headers, body = self.download({"path": f, "mode": mode, "copy_semantics": "cp-v1"}, BOTH)
            self.assertEqual((status, body, headers["content-type"]), (200, b"hello", "application/octet-stream"))
            self.assertEqual((headers["x-slicer-source-type"], name_of(headers), headers["x-slicer-file-mode"],
                              headers["content-length"]), ("file", "f", "0640", "5"), mode)
        for mode in ("cp-v1-tar", "cp-v1-recursive", "tar"):
            status, headers, body = self.download({"path": d, "mode": mode}, BOTH if "recursive" in mode
                                                  else "application/x-tar")
            self.assertEqual((status, headers["content-type"], headers["x-slicer-source-type"], name_of(headers),
                              headers["x-slicer-file-mode"]), (200, "application/x-tar", "directory", "dir", "0751"))
            self.assertEqual(body[257:262], b"ustar")
            self.assertEqual(members(body), {"n?>~": b"x", "sub": None, "sub/f": b"hello"}, mode)
        # A name whose base64 needs '-' or '_' and padding: url-safe, unpadded.
        status, headers, _ = self.download({"path": f"{d}/n?>~", "mode": "cp-v1-binary"})
        self.assertEqual((status, headers["x-slicer-source-name-base64"], name_of(headers)), (200, "bj8-fg", "n?>~"))
        # The refusals: a directory in binary modes (the words the legacy fallback reads), a file in cp-v1-tar.
        for mode in ("binary", "cp-v1-binary"):
            status, _, body = self.download({"path": d, "mode": mode})
            self.assertEqual(status, 400)
            self.assertIn(b"must specify a file not a directory", body)
        status, _, body = self.download({"path": f, "mode": "cp-v1-tar"}, "application/x-tar")
        self.assertEqual((status, json.loads(body)["code"]), (400, "not_a_directory"))
        # The legacy tar of a file still has one entry.
        status, headers, body = self.download({"path": f, "mode": "tar"}, "application/x-tar")
        self.assertEqual((status, members(body)), (200, {"f": b"hello"}))

    def test_download_missing_and_contents(self) -> None:
        """A missing source is 404 in every mode; dir/. is the directory; / has no name header."""
        for mode in ("binary", "tar", "cp-v1-binary", "cp-v1-tar", "cp-v1-recursive"):
            status, _, body = self.download({"path": f"{self.root}/none", "mode": mode}, BOTH)
            self.assertEqual((status, json.loads(body)["code"]), (404, "not_found"), mode)
        self.sh(f"mkdir {self.root}/d && echo 1 > {self.root}/d/one")
        status, headers, body = self.download({"path": f"{self.root}/d/.", "mode": "cp-v1-recursive"}, BOTH)
        self.assertEqual((status, headers["x-slicer-source-type"], members(body)), (200, "directory", {"one": b"1\n"}))
        # / has no name (clients allow that for a copy of contents); "*" leaves everything out of its tar.
        status, headers, body = self.download({"path": "/", "mode": "cp-v1-tar", "exclude": "*"}, "application/x-tar")
        self.assertEqual((status, headers["x-slicer-source-type"], members(body)), (200, "directory", {}))
        self.assertNotIn("x-slicer-source-name-base64", headers)

    def test_legacy_modes_and_fallback(self) -> None:
        """No mode is binary; legacy binary and tar round-trip; binary of a directory is the 400 Go falls back on."""
        r = self.root
        status, answer = self.upload({"path": f"{r}/plain"}, b"no mode")
        self.assertEqual((status, answer["mode"]), (200, "binary"))
        status, answer = self.upload({"path": f"{r}/t", "mode": "tar"}, tar_of([("x", b"1")]), tar=True)
        self.assertEqual((status, answer["path"]), (200, f"{r}/t"))
        status, _, body = self.download({"path": f"{r}/plain"})
        self.assertEqual((status, body), (200, b"no mode"))
        status, _, body = self.download({"path": f"{r}/t", "mode": "binary"})
        self.assertEqual(status, 400)
        self.assertIn(b"must specify a file not a directory", body)
        self.assertNotIn(b"invalid mode", body)
        status, _, body = self.download({"path": f"{r}/t", "mode": "tar"}, "application/x-tar")
        self.assertEqual((status, members(body)), (200, {"x": b"1"}))
        for mode in ("cp-v1-binary", "cp-v1-tar", "cp-v1-recursive"):
            status, _, body = self.download({"path": f"{r}/plain", "mode": mode}, BOTH)
            self.assertNotIn(b"invalid mode", body, mode)

    # -- exclude ------------------------------------------------------------------------------

    def test_exclude_both_ways(self) -> None:
        """exclude leaves entries (and a directory's contents) out of an upload's extraction and of a download's tar."""
        r = self.root
        archive = tar_of([("keep", b"k"), ("a.log", b"l"), ("cache/", None), ("cache/x", b"c"), ("sub/", None),
                          ("sub/b.log", b"l"), ("sub/keep", b"k")])
        for name, query in (("v1", self.v1("tar", f"{r}/v1", "v1", "directory")),
                            ("legacy", {"path": f"{r}/legacy", "mode": "tar"})):
            status, answer = self.upload({**query, "exclude": ["*.log", "cache/"]}, archive, tar=True)
            self.assertEqual((status, answer["entries"]), (200, 3), answer)
            self.assertEqual(self.tree(f"{r}/{name}"), ["keep=k", "sub/", "sub/keep=k"], name)
        self.sh(f"mkdir -p {r}/src/node_modules/x {r}/src/deep/node_modules && echo k > {r}/src/keep"
                f" && echo t > {r}/src/deep/t.tmp && echo y > {r}/src/node_modules/x/y")
        for mode in ("cp-v1-tar", "tar", "cp-v1-recursive"):
            status, _, body = self.download({"path": f"{r}/src", "mode": mode,
                                             "exclude": ["node_modules", "**/*.tmp"]}, BOTH)
            self.assertEqual((status, members(body)), (200, {"deep": None, "keep": b"k\n"}), mode)

    # -- X-Slicer-Unpacked-Size -------------------------------------------------------------

    def test_unpacked_size_refused_on_a_small_file_system(self) -> None:
        """A 1 MiB tmpfs: an announced 4 MiB is 507 in every upload mode with nothing written; a small one fits."""
        small = f"{self.root}/small"
        self.sh(f"mkdir -p {small} && mount -t tmpfs -o size=1m tmpfs {small}")
        self.addCleanup(self.sh, f"umount {small}")
        big = {"X-Slicer-Unpacked-Size": str(4 << 20)}
        archive = tar_of([("f", b"x" * 1000)])
        for query, tar in ((self.v1("tar", small, "src", "directory"), True),
                           (self.v1("tar", small, None, "directory", copy_contents="true"), True),
                           (self.v1("tar", f"{small}/new/deeper", "src", "directory"), True),
                           ({"path": f"{small}/legacy", "mode": "tar"}, True),
                           (self.v1("binary", small, "f", "file"), False),
                           ({"path": f"{small}/f"}, False)):
            status, answer = self.upload(query, archive if tar else b"x" * 1000, tar=tar, headers=big)
            self.assertEqual((status, answer["code"]), (507, "insufficient_storage"), (query, answer))
            self.assertIn("nothing was written", answer["error"])
            self.assertEqual(self.out(f"ls -A {small}"), "", query)
        status, answer = self.upload(self.v1("tar", small, "src", "directory"), archive, tar=True,
                                     headers={"X-Slicer-Unpacked-Size": "1000"})
        self.assertEqual(status, 200, answer)
        self.assertEqual(self.tree(small), ["src/", "src/f=" + "x" * 1000])

    def test_full_file_system_leaves_nothing(self) -> None:
        """Without the header, a tar that does not fit is 507 when the disk fills, and the staging is removed."""
        small = f"{self.root}/small"
        self.sh(f"mkdir -p {small} && mount -t tmpfs -o size=1m tmpfs {small}")
        self.addCleanup(self.sh, f"umount {small}")
        archive = tar_of([("a", b"a" * (600 << 10)), ("b", b"b" * (600 << 10))])
        status, answer = self.upload(self.v1("tar", small, "src", "directory"), archive, tar=True)
        self.assertEqual((status, answer["code"]), (507, "insufficient_storage"), answer)
        self.assertEqual(self.out(f"ls -A {small}"), "")
        status, answer = self.upload(self.v1("binary", small, "big", "file"), b"z" * (2 << 20))
        self.assertEqual((status, answer["code"]), (507, "insufficient_storage"), answer)
        self.assertEqual(self.out(f"ls -A {small}"), "")

    def test_merge_across_a_mount_point(self) -> None:
        """A merge into a directory with a file system mounted inside it places entries on both."""
        tree = f"{self.root}/tree"
        self.sh(f"mkdir -p {tree}/mnt && mount -t tmpfs -o size=4m tmpfs {tree}/mnt && printf old > {tree}/mnt/f")
        self.addCleanup(self.sh, f"umount {tree}/mnt")
        archive = tar_of([("top", b"t"), ("mnt/", None), ("mnt/f", b"new"), ("mnt/sub/", None), ("mnt/sub/g", b"g")])
        status, answer = self.upload(self.v1("tar", tree, None, "directory", copy_contents="true", uid=1234,
                                             gid=1234), archive, tar=True)
        self.assertEqual(status, 200, answer)
        self.assertEqual(self.tree(tree), ["mnt/", "mnt/f=new", "mnt/sub/", "mnt/sub/g=g", "top=t"])
        self.assertEqual(self.out(f"stat -c %u:%g {tree}/mnt/sub/g {tree}/mnt/f").split(), ["1234:1234"] * 2)
        self.assertEqual(self.out(f"ls -A {tree}/mnt"), "f\nsub\n")

    # -- ~ -------------------------------------------------------------------------------------

    def test_home(self) -> None:
        """~ is root's home without uid, the user's from /etc/passwd with one; root's for a uid with no entry."""
        self.sh("cp /etc/passwd /etc/passwd.vmservice-test && echo 'tester:x:1234:1234::/home/tester:/bin/sh'"
                " >> /etc/passwd && mkdir -p /home/tester && chown 1234:1234 /home/tester")
        self.addCleanup(self.sh, "mv /etc/passwd.vmservice-test /etc/passwd && rm -rf /home/tester /root/cp-v1-home")
        status, answer = self.upload(self.v1("binary", "~/cp-v1-home", "x", "file"), b"root's")
        self.assertEqual((status, answer["path"]), (200, "/root/cp-v1-home"))
        query = self.v1("binary", "~/", "mine", "file", uid=1234, gid=1234)
        status, answer = self.upload(query, b"tester's")
        self.assertEqual((status, answer["path"]), (200, "/home/tester/mine"))
        self.assertEqual(self.out("stat -c %u:%g /home/tester/mine").strip(), "1234:1234")
        status, headers, body = self.download({"path": "~/mine", "mode": "cp-v1-binary", "uid": 1234})
        self.assertEqual((status, body, name_of(headers)), (200, b"tester's", "mine"))
        status, _, body = self.download({"path": "~", "mode": "cp-v1-tar", "uid": 1234}, "application/x-tar")
        self.assertEqual((status, members(body)), (200, {"mine": b"tester's"}))
        status, answer = self.upload(self.v1("binary", "~/cp-v1-home", "x", "file", uid=4321), b"a stranger's")
        self.assertEqual((status, answer["path"]), (200, "/root/cp-v1-home"), answer)
        self.assertEqual(self.out("stat -c %u /root/cp-v1-home").strip(), "4321")


    # -- vmctl cp: the same rules both ways ----------------------------------------------

    def vmctl(self, *argv: str) -> tuple[int, str]:
        """Run ``vmctl`` against the daemon: its exit status and stderr."""
        result = subprocess.run(
            [sys.executable, "-m", "vmservice.cli.main", "--url", f"http://127.0.0.1:{self.daemon.port}", *argv],
            capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
        return result.returncode, result.stderr.decode()

    def local(self) -> str:
        path = tempfile.mkdtemp(prefix="vms-cp1-", dir="/tmp")
        self.addCleanup(shutil.rmtree, path, True)
        return path

    def test_vmctl_upload_placement(self) -> None:
        """vmctl cp up: a file and a directory into an existing directory by name, DIR/. merged, a missing X/ refused."""
        r, here = self.root, self.local()
        os.makedirs(os.path.join(here, "site", "css"))
        for name, data in (("site/index.html", b"<p>"), ("site/css/a.css", b"a{}"), ("note.txt", b"n")):
            with open(os.path.join(here, name), "wb") as f:
                f.write(data)
        self.sh(f"mkdir -p {r}/www {r}/merge && printf old > {r}/merge/keep")
        self.assertEqual(self.vmctl("cp", f"{here}/note.txt", f"demo-1:{r}/www"), (0, ""))
        self.assertEqual(self.vmctl("cp", f"{here}/site", f"demo-1:{r}/www/"), (0, ""))
        self.assertEqual(self.vmctl("cp", f"{here}/site/.", f"demo-1:{r}/merge"), (0, ""))
        self.assertEqual(self.vmctl("cp", f"{here}/site", f"demo-1:{r}/fresh"), (0, ""))
        code, err = self.vmctl("cp", f"{here}/note.txt", f"demo-1:{r}/missing/")
        self.assertEqual(code, 1)
        self.assertIn("missing_destination", err)
        self.assertEqual(self.tree(r), [
            "fresh/", "fresh/css/", "fresh/css/a.css=a{}", "fresh/index.html=<p>",
            "merge/", "merge/css/", "merge/css/a.css=a{}", "merge/index.html=<p>", "merge/keep=old",
            "www/", "www/note.txt=n", "www/site/", "www/site/css/", "www/site/css/a.css=a{}",
            "www/site/index.html=<p>"])

    def test_vmctl_download_placement(self) -> None:
        """vmctl cp down: the same rules placed here: by name into a directory, DIR/. merged, refusals."""
        r, here = self.root, self.local()
        self.sh(f"mkdir -p {r}/logs/old && printf a > {r}/logs/a.log && printf b > {r}/logs/old/b.log"
                f" && printf f > {r}/f.txt && chmod 0604 {r}/f.txt")
        os.makedirs(os.path.join(here, "into"))
        with open(os.path.join(here, "into", "mine"), "wb") as f:
            f.write(b"mine")
        self.assertEqual(self.vmctl("cp", f"demo-1:{r}/logs", f"{here}/into"), (0, ""))
        self.assertEqual(self.vmctl("cp", f"demo-1:{r}/logs/.", f"{here}/into"), (0, ""))
        self.assertEqual(self.vmctl("cp", f"demo-1:{r}/logs", f"{here}/new"), (0, ""))
        self.assertEqual(self.vmctl("cp", f"demo-1:{r}/f.txt", f"{here}/into/"), (0, ""))
        self.assertEqual(self.vmctl("cp", "--exclude", "old", f"demo-1:{r}/logs", f"{here}/trimmed"), (0, ""))
        found = sorted(os.path.relpath(os.path.join(d, n), here) for d, ds, fs in os.walk(here) for n in ds + fs)
        self.assertEqual(found, ["into", "into/a.log", "into/f.txt", "into/logs", "into/logs/a.log", "into/logs/old",
                                 "into/logs/old/b.log", "into/mine", "into/old", "into/old/b.log", "new", "new/a.log",
                                 "new/old", "new/old/b.log", "trimmed", "trimmed/a.log"])
        self.assertEqual(os.stat(os.path.join(here, "into", "f.txt")).st_mode & 0o777, 0o604)
        code, err = self.vmctl("cp", f"demo-1:{r}/f.txt", f"{here}/nowhere/")
        self.assertEqual((code, err), (1, f"vmctl: {here}/nowhere/: no such directory\n"))
        code, err = self.vmctl("cp", f"demo-1:{r}/logs", f"{here}/into/mine")
        self.assertEqual((code, err), (1, f"vmctl: {here}/into/mine exists and is not a directory\n"))
        self.assertFalse(os.path.exists(os.path.join(here, "nowhere")))
