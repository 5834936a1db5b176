"""
Tests of :mod:`vmservice.e2b.files` and the signed-URL routing of
:mod:`vmservice.e2b.site`: downloads and uploads of ``/files`` over a
guest's file system in memory (multipart and raw, gzip both ways, metadata
headers), envd's refusals, and signed URLs (valid, expired, for another
user, operation or path; without the sandbox header).
"""

from __future__ import annotations

import gzip
import json
from typing import Any, Mapping
from urllib.parse import quote, urlencode

import httpx
from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import parse_response
from tests.e2b.fs_fakes import FsCase, Node
from vmservice.e2b.files import accepts_gzip, disposition
from vmservice.e2b.signing import signature
from vmservice.errors import AgentError, GuestErrorKind


class HeaderTests(SynchronousTestCase):
    def test_disposition(self) -> None:
        self.assertEqual(disposition("a.txt"), b"inline; filename=a.txt")
        self.assertEqual(disposition('a "b".txt'), b'inline; filename="a \\"b\\".txt"')
        self.assertEqual(disposition("é.txt"), b"inline; filename*=utf-8''%C3%A9.txt")

    def test_accepts_gzip(self) -> None:
        for header, accepted in ((b"gzip", True), (b"br, gzip;q=0.5", True), (b"gzip;q=0", False),
                                 (b"identity", False), (None, False), (b"*", True)):
            self.assertEqual(accepts_gzip(header), accepted, header)


class FilesCase(FsCase):
    def setUp(self) -> None:
        super().setUp()
        self.guest.put("/home/user/a.txt", Node("file", b"hello" * 1000, uid=1000, gid=1000))

    def request(self, method: str, query: Mapping[str, str], content: bytes = b"",
                headers: Mapping[str, str | None] | None = None, sandbox: bool = True) -> tuple[int, Any, bytes]:
        _, transport = self.send(method, "/files?" + urlencode(query, quote_via=quote), content,
                                 headers, sandbox)  # type: ignore[arg-type]
        return parse_response(transport.value())


class DownloadTests(FilesCase):
    def test_download(self) -> None:
        status, headers, body = self.request("GET", {"path": "a.txt"})
        self.assertEqual((status, body), (200, b"hello" * 1000))
        self.assertEqual(headers[b"content-type"], b"application/octet-stream")
        self.assertEqual(headers[b"content-disposition"], b"inline; filename=a.txt")
        self.assertEqual(headers[b"content-length"], b"5000")

    def test_gzip(self) -> None:
        status, headers, body = self.request("GET", {"path": "/home/user/a.txt"}, headers={"Accept-Encoding": "gzip"})
        self.assertEqual((status, headers[b"content-encoding"]), (200, b"gzip"))
        self.assertEqual(gzip.decompress(body), b"hello" * 1000)

    def test_missing_and_directory(self) -> None:
        status, _, body = self.request("GET", {"path": "nope"})
        self.assertEqual((status, json.loads(body)), (404, {"code": 404, "message": "path '/home/user/nope' does not exist"}))
        status, _, body = self.request("GET", {"path": "/home"})
        self.assertEqual((status, json.loads(body)["message"]), (400, "path '/home' is a directory"))

    def test_unknown_user(self) -> None:
        status, _, body = self.request("GET", {"path": "a.txt", "username": "nobody"})
        self.assertEqual((status, json.loads(body)["code"]), (401, 401))

    def test_as_root(self) -> None:
        self.guest.put("/root/r", Node("file", b"r"))
        self.assertEqual(self.request("GET", {"path": "r", "username": "root"})[2], b"r")


class UploadTests(FilesCase):
    def multipart(self, files: list[tuple[str, bytes]], query: Mapping[str, str] | None = None,
                  headers: Mapping[str, str] | None = None) -> tuple[int, Any, bytes]:
        built = httpx.Request("POST", "http://h/files", files=[("file", (name, data)) for name, data in files])
        return self.request("POST", query or {}, built.read(),
                            {"Content-Type": built.headers["content-type"], **(headers or {})})

    def test_multipart(self) -> None:
        status, _, body = self.multipart([("/tmp/one", b"1"), ("rel/two", b"2" * 5000)])
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body), [{"path": "/tmp/one", "name": "one", "type": "file"},
                                            {"path": "/home/user/rel/two", "name": "two", "type": "file"}])
        self.assertEqual(self.guest.nodes["/home/user/rel/two"].data, b"2" * 5000)
        self.assertEqual((self.guest.uploads[0].request.uid, self.guest.uploads[0].request.gid), (1000, 1000))

    def test_multipart_path_parameter(self) -> None:
        status, _, body = self.multipart([("ignored", b"x")], {"path": "/tmp/here"})
        self.assertEqual(json.loads(body)[0]["path"], "/tmp/here")

    def test_same_path_twice(self) -> None:
        status, _, body = self.multipart([("/tmp/x", b"1"), ("/tmp/x", b"2")])
        self.assertEqual(status, 400)
        self.assertIn("multiple files to the same path", json.loads(body)["message"])

    def test_raw(self) -> None:
        status, _, body = self.request("POST", {"path": "raw.bin"}, b"\x00" * 300,
                                       {"Content-Type": "application/octet-stream"})
        self.assertEqual((status, json.loads(body)[0]["path"]), (200, "/home/user/raw.bin"))
        self.assertEqual(self.guest.nodes["/home/user/raw.bin"].data, b"\x00" * 300)

    def test_raw_gzip(self) -> None:
        content = bytes(range(256)) * 2000
        status, _, _ = self.request("POST", {"path": "z"}, gzip.compress(content),
                                    {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
        self.assertEqual((status, self.guest.nodes["/home/user/z"].data), (200, content))
        self.assertLessEqual(self.guest.uploads[0].most, 64 * 1024)

    def test_bad_gzip(self) -> None:
        status, _, _ = self.request("POST", {"path": "z"}, b"not gzip",
                                    {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
        self.assertEqual(status, 400)
        self.assertTrue(self.guest.uploads[0].aborted)

    def test_raw_needs_path(self) -> None:
        status, _, body = self.request("POST", {}, b"x", {"Content-Type": "application/octet-stream"})
        self.assertEqual(json.loads(body), {"code": 400, "message": "path query parameter is required for raw "
                                                                    "body upload"})

    def test_unsupported_type(self) -> None:
        self.assertEqual(self.request("POST", {"path": "x"}, b"x", {"Content-Type": "text/plain"})[0], 400)

    def test_metadata(self) -> None:
        status, _, body = self.request("POST", {"path": "m"}, b"x", {"Content-Type": "application/octet-stream",
                                                                       "X-Metadata-Owner-Team": "infra"})
        self.assertEqual(json.loads(body)[0]["metadata"], {"owner-team": "infra"})
        self.assertEqual(self.guest.nodes["/home/user/m"].metadata, {"owner-team": "infra"})

    def test_bad_metadata(self) -> None:
        status, _, _ = self.request("POST", {"path": "m"}, b"x", {"Content-Type": "application/octet-stream",
                                                                    "X-Metadata-K": "v" * 5000})
        self.assertEqual(status, 400)

    def test_guest_failure(self) -> None:
        self.guest.fail_upload["/home/user/full"] = AgentError(GuestErrorKind.NO_SPACE, "no space left")
        status, _, body = self.request("POST", {"path": "full"}, b"x", {"Content-Type": "application/octet-stream"})
        self.assertEqual((status, json.loads(body)["code"]), (507, 507))

    def test_bad_multipart(self) -> None:
        status, _, _ = self.request("POST", {}, b"--b\r\nno headers end", {"Content-Type": "multipart/form-data; boundary=b"})
        self.assertEqual(status, 400)


class SignedTests(FilesCase):
    def signed(self, signed_path: str, operation: str, user: str | None = None,
               expiration: int | None = None, **changes: str) -> dict[str, str]:
        query = {"path": signed_path,
                 "signature": signature(signed_path, operation, user or "", self.token, expiration)}
        if user:
            query["username"] = user
        if expiration is not None:
            query["signature_expiration"] = str(expiration)
        query.update(changes)
        return query

    def test_valid_without_header(self) -> None:
        status, _, body = self.request("GET", self.signed("a.txt", "read"), sandbox=False)
        self.assertEqual((status, body[:5]), (200, b"hello"))
        status, _, body = self.request("POST", self.signed("up", "write", "root", 1767225600 + 60),
                                       b"x", {"Content-Type": "application/octet-stream"}, sandbox=False)
        self.assertEqual((status, json.loads(body)[0]["path"]), (200, "/root/up"))

    def test_with_sandbox_header(self) -> None:
        status, _, _ = self.request("GET", self.signed("a.txt", "read"),
                                    headers={"X-Access-Token": None})
        self.assertEqual(status, 200)

    def test_expired(self) -> None:
        status, _, body = self.request("GET", self.signed("a.txt", "read", expiration=1767225600 - 1),
                                       sandbox=False)
        self.assertEqual((status, json.loads(body)), (401, {"code": 401, "message": "signature is already expired"}))

    def test_wrong(self) -> None:
        for query in (self.signed("a.txt", "write"), self.signed("a.txt", "read", username="root"),
                      self.signed("a.txt", "read", path="b.txt"),
                      self.signed("a.txt", "read", expiration=1767225600 + 60, signature_expiration="1")):
            status, _, body = self.request("GET", query, sandbox=False)
            self.assertEqual((status, json.loads(body)), (401, {"code": 401, "message": "invalid signature"}))
            status, _, body = self.request("GET", query, headers={"X-Access-Token": None})
            self.assertEqual((status, json.loads(body)["message"]), (401, "invalid signature"))

    def test_unsigned_without_header(self) -> None:
        status, _, body = self.request("GET", {"path": "a.txt"}, sandbox=False)
        self.assertEqual(status, 404)

    def test_missing_signature(self) -> None:
        status, _, body = self.request("GET", {"path": "a.txt"}, headers={"X-Access-Token": None})
        self.assertEqual(json.loads(body)["message"], "missing signature query parameter")

    def test_wrong_token_header(self) -> None:
        status, _, body = self.request("GET", {"path": "a.txt"}, headers={"X-Access-Token": "wrong"})
        self.assertEqual((status, json.loads(body)["message"]),
                         (401, "access token present in header but does not match"))
