# -*- test-case-name: tests.api.test_copying -*-
"""
``/vm/{hostname}/cp`` (:mod:`vmservice.api.copying`) through the real Api on a
:class:`~vmservice.api.streaming.StreamingSite` and an HTTP/1.1 channel over a
``StringTransport``, with a fake agent whose copy streams the test drives;
plus the parsers in :mod:`vmservice.api.inputs.copies` and a round trip over
treq's StubTreq.
"""

from __future__ import annotations

import json
from typing import Any

from treq.testing import StubTreq
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.http_headers import Headers

from tests.fakes import OneNodeFleet
from tests.api.connections import open_connection, parse_response
from vmservice.agent.stream import StreamReset
from vmservice.api.app import Api
from vmservice.api.copying import CopyApi, name_header
from vmservice.api.streaming import StreamingSite
from vmservice.wire.payloads import encode_head
from vmservice.metrics import Metrics
from vmservice.wire import ResetCode




def _ok(**result: Any) -> bytes:
    return json.dumps({"ok": True, "result": result}).encode()


class CopyApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.fleet = OneNodeFleet()
        self.api = Api(self.reactor, CopyApi(self.fleet).routes(), Metrics(), None)  # type: ignore[arg-type]
        self.site = StreamingSite(self.api.resource(), self.api.plan_body, reactor=self.reactor)
        self.connect()

    def connect(self) -> None:
        """A new HTTP connection (a request that waits for its stream holds its own)."""
        self.channel, self.transport = open_connection(self, self.site)

    def send(self, method: str, query: str, body: bytes = b"", headers: str = "", chunked: bool = False) -> None:
        head = f"{method} /vm/demo-1/cp?{query} HTTP/1.1\r\nHost: x\r\n{headers}".encode()
        if chunked:
            head += b"Transfer-Encoding: chunked\r\n\r\n"
        else:
            head += b"Content-Length: %d\r\n\r\n" % len(body) + body
        self.channel.dataReceived(head)
        self.reactor.advance(0)

    @property
    def streams(self) -> list[Any]:
        return self.fleet.agent.streams

    def response(self) -> tuple[int, dict[bytes, bytes], bytes]:
        return parse_response(self.transport.value())

    def assertError(self, status: int, text: str | None = None) -> dict[str, Any]:
        code, headers, body = self.response()
        self.assertEqual(code, status, body)
        error = json.loads(body)
        if text is not None:
            self.assertIn(text, error["error"])
        return error

    # -- input ----------------------------------------------------------------------

    def test_modes(self) -> None:
        """Unknown modes are 400 "invalid mode: <m>" before any stream; the cp-v1 modes are modes, never refused so."""
        for method in ("GET", "POST"):
            for mode in ("cp-v2-binary", "zip", "cp-v1"):
                self.transport.clear()
                self.send(method, f"path=/x&mode={mode}")
                self.assertError(400, f"invalid mode: {mode}")
        self.assertEqual(self.streams, [])
        for method in ("GET", "POST"):
            for mode in ("cp-v1-binary", "cp-v1-tar", "cp-v1-recursive"):
                self.connect()
                self.send(method, f"path=/x&mode={mode}&copy_semantics=cp-v1&source_name=x", b"x")
                self.assertEqual(self.streams[-1].header["semantics"], "cp-v1", (method, mode))
                self.assertNotIn(b"invalid mode", self.transport.value())
        self.assertEqual(len(self.streams), 6)

    def test_cp_v1_upload_headers(self) -> None:
        """The cp-v1 query becomes the OPEN header: the wire mode, source name, copy_contents, excludes, size."""
        self.send("POST", "path=/srv/&mode=cp-v1-binary&copy_semantics=cp-v1&source_name=f.txt&source_type=file"
                          "&uid=0&gid=0&permissions=0600", b"x")
        self.assertEqual(self.streams[-1].header, {
            "op": "cp-upload", "path": "/srv/", "mode": "binary", "uid": 0, "gid": 0, "permissions": 0o600,
            "semantics": "cp-v1", "source_name": "f.txt", "copy_contents": False})
        self.connect()
        self.send("POST", "path=/srv&mode=cp-v1-tar&copy_semantics=cp-v1&source_name=&source_type=directory"
                          "&copy_contents=true&exclude=*.log&exclude=.git&exclude=", b"x",
                  headers="Content-Type: application/x-tar\r\nX-Slicer-Unpacked-Size: 12345\r\n")
        self.assertEqual(self.streams[-1].header, {
            "op": "cp-upload", "path": "/srv", "mode": "tar", "uid": None, "gid": None, "permissions": None,
            "semantics": "cp-v1", "source_name": None, "copy_contents": True, "exclude": ["*.log", ".git", ""],
            "unpacked_size": 12345})

    def test_cp_v1_recursive_upload(self) -> None:
        """cp-v1-recursive uploads by source_type, else by Content-Type; copy_semantics alone makes cp-v1."""
        for query, headers, mode in (("source_type=directory", "", "tar"), ("source_type=file", "", "binary"),
                                     ("", "Content-Type: application/x-tar\r\n", "tar")):
            self.connect()
            self.send("POST", f"path=/d&mode=cp-v1-recursive&source_name=d&{query}", b"x", headers=headers)
            self.assertEqual((self.streams[-1].header["mode"], self.streams[-1].header["semantics"]), (mode, "cp-v1"))
        self.connect()
        self.send("POST", "path=/d&mode=binary&copy_semantics=cp-v1&source_name=f", b"x")
        self.assertEqual(self.streams[-1].header["semantics"], "cp-v1")

    def test_legacy_ignores_cp_v1_parameters(self) -> None:
        """A legacy upload keeps today's header; exclude and the unpacked size are still passed on."""
        self.send("POST", "path=/d&mode=tar&source_name=a/b&copy_contents=true&exclude=x", b"x",
                  headers="X-Slicer-Unpacked-Size: 7\r\n")
        self.assertEqual(self.streams[-1].header, {"op": "cp-upload", "path": "/d", "mode": "tar", "uid": None,
                                                   "gid": None, "permissions": None, "exclude": ["x"],
                                                   "unpacked_size": 7})

    def test_cp_v1_bad_input(self) -> None:
        """Contradictory or malformed cp-v1 parameters, and a bad unpacked size, are 400 before any stream."""
        for query, headers in (
            ("mode=cp-v1-binary&source_name=f&source_type=directory", ""),
            ("mode=cp-v1-tar&source_name=d&source_type=file", ""),
            ("mode=cp-v1-binary&source_name=f&copy_contents=true", ""),
            ("mode=cp-v1-binary&source_name=a/b", ""),
            ("mode=cp-v1-tar&source_name=..", ""),
            ("mode=cp-v1-binary", ""),
            ("mode=cp-v1-tar&source_name=", ""),
            ("mode=binary&copy_semantics=cp-v2&source_name=f", ""),
            ("mode=cp-v1-binary&source_name=f&source_type=link", ""),
            ("mode=tar", "X-Slicer-Unpacked-Size: -1\r\n"),
            ("mode=cp-v1-tar&source_name=d", "X-Slicer-Unpacked-Size: 1.5e3\r\n"),
        ):
            self.connect()
            self.send("POST", f"path=/x&{query}", b"data", headers=headers)
            error = self.assertError(400)
            self.assertIn(error["code"], ("invalid_query", "invalid_header"), query)
        self.assertEqual(self.streams, [])

    def test_upload_guest_refusals(self) -> None:
        """No room is 507 insufficient_storage; a missing directory destination 400 missing_destination."""
        for kind, status, code in (("no_space", 507, "insufficient_storage"),
                                   ("missing_destination", 400, "missing_destination"),
                                   ("not_a_directory", 400, "not_a_directory")):
            self.connect()
            self.send("POST", "path=/x/&mode=cp-v1-binary&source_name=f", chunked=True)
            stream = self.streams[-1]
            stream.deliver(json.dumps({"ok": False, "error": kind, "message": f"said {kind}"}).encode())
            stream.protocol.readConnectionLost()
            error = self.assertError(status, f"said {kind}")
            self.assertEqual(error["code"], code)
            self.assertEqual(stream.aborted[0], ResetCode.CANCEL)

    def test_bad_input(self) -> None:
        """Missing or relative path, bad uid/gid/permissions are 400."""
        for query in ("", "path=rel", "path=/x&uid=-1", "path=/x&gid=abc", "path=/x&permissions=0999",
                      "path=/x&permissions=rw"):
            self.transport.clear()
            self.send("POST", query, b"data")
            self.assertError(400)
        self.transport.clear()
        self.send("GET", "path=")
        self.assertError(400)
        self.assertEqual(self.streams, [])

    def test_node_errors(self) -> None:
        """Unknown VM 404, paused 409, agent down 503."""
        for state, status in (("running", 404), ("paused", 409), ("down", 503)):
            self.fleet.state = state
            for method in ("GET", "POST"):
                self.transport.clear()
                host = "nope" if status == 404 else "demo-1"
                self.channel.dataReceived(f"{method} /vm/{host}/cp?path=/x HTTP/1.1\r\nHost: x\r\n"
                                          f"Content-Length: 0\r\n\r\n".encode())
                self.reactor.advance(0)
                self.assertError(status)

    def test_upload_header(self) -> None:
        """Query and Content-Type become the OPEN header; 4294967295 means not set."""
        self.send("POST", "path=/srv/f&uid=4294967295&gid=7&permissions=0640", b"x")
        self.assertEqual(self.streams[-1].header, {"op": "cp-upload", "path": "/srv/f", "mode": "binary", "uid": None,
                                                   "gid": 7, "permissions": 0o640})
        self.connect()
        self.send("POST", "path=/srv/d", b"x", headers="Content-Type: application/x-tar\r\n")
        self.assertEqual(self.streams[-1].header["mode"], "tar")
        self.connect()
        self.send("POST", "path=/srv/d&mode=binary", b"x", headers="Content-Type: application/x-tar\r\n")
        self.assertEqual(self.streams[-1].header["mode"], "binary")

    # -- upload ---------------------------------------------------------------------

    def test_upload_streams_then_200(self) -> None:
        """The body streams into the stream as it arrives, EOF half-closes, the guest's reply is a 200 CopyResult."""
        self.send("POST", "path=/f", chunked=True)
        stream = self.streams[-1]
        self.channel.dataReceived(b"5\r\nhello\r\n")
        self.assertEqual(bytes(stream.written), b"hello")
        self.assertFalse(stream.half_closed)
        self.channel.dataReceived(b"6\r\n world\r\n0\r\n\r\n")
        self.assertEqual((bytes(stream.written), stream.half_closed), (b"hello world", True))
        self.assertEqual(self.transport.value(), b"")
        stream.deliver(_ok(path="/f", size=11))
        stream.protocol.readConnectionLost()
        stream.end()
        status, _, body = self.response()
        self.assertEqual((status, json.loads(body)), (200, {"path": "/f", "mode": "binary", "size": 11}))

    def test_upload_back_pressure(self) -> None:
        """The stream pausing its producer (the body) pauses the HTTP connection."""
        self.send("POST", "path=/f", chunked=True)
        stream = self.streams[-1]
        stream.producer.pauseProducing()
        self.channel.dataReceived(b"5\r\nhello\r\n")
        self.assertEqual(self.transport.producerState, "paused")
        stream.producer.resumeProducing()
        self.assertEqual(self.transport.producerState, "producing")

    def test_upload_refused_early(self) -> None:
        """A refusal before the body ended is a 400; the stream is reset."""
        self.send("POST", "path=/d&mode=tar", chunked=True)
        stream = self.streams[-1]
        self.channel.dataReceived(b"3\r\nabc\r\n")
        stream.deliver(json.dumps({"ok": False, "error": "unsafe_entry", "message": "'/etc/x': absolute"}).encode())
        stream.protocol.readConnectionLost()
        self.assertError(400, "absolute")
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)

    def test_upload_client_gone(self) -> None:
        """A client that disconnects mid-body resets the stream (the guest drops the partial file)."""
        self.send("POST", "path=/f", chunked=True)
        stream = self.streams[-1]
        self.channel.dataReceived(b"3\r\nabc\r\n")
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)

    # -- download -------------------------------------------------------------------

    def test_download_binary(self) -> None:
        """Headers from the head (mode, type, base64url name, length), then the bytes."""
        self.send("GET", "path=/etc/hosts", headers="Accept: application/octet-stream\r\n")
        stream = self.streams[-1]
        self.assertEqual(stream.header, {"op": "cp-download", "path": "/etc/hosts", "mode": "binary"})
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "hosts", "mode": 0o644, "size": 5}})
                       + b"he")
        stream.deliver(b"llo")
        stream.end()
        status, headers, body = self.response()
        self.assertEqual((status, body), (200, b"hello"))
        self.assertEqual(headers[b"x-service-file-mode"], b"0644")
        self.assertEqual(headers[b"x-slicer-file-mode"], b"0644")
        self.assertEqual(headers[b"x-slicer-source-type"], b"file")
        self.assertEqual(headers[b"x-slicer-source-name-base64"], b"aG9zdHM")
        self.assertEqual(headers[b"content-length"], b"5")
        self.assertEqual(headers[b"content-type"], b"application/octet-stream")

    def test_download_tar_by_accept(self) -> None:
        """Accept: application/x-tar alone selects tar; the answer is chunked x-tar."""
        self.send("GET", "path=/srv", headers="Accept: application/x-tar\r\n")
        stream = self.streams[-1]
        self.assertEqual(stream.header["mode"], "tar")
        stream.deliver(encode_head({"ok": True, "result": {"type": "directory", "name": "srv", "mode": 0o755,
                                                           "size": None}}) + b"TAR")
        stream.end()
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-type"], headers[b"x-slicer-source-type"], body),
                         (200, b"application/x-tar", b"directory", b"TAR"))

    def test_download_errors(self) -> None:
        """A missing path is 404; a directory in binary mode is 400 with the words clients look for."""
        self.send("GET", "path=/none")
        self.streams[-1].deliver(encode_head({"ok": False, "error": "not_found", "message": "/none: No such file"}))
        self.streams[-1].end()
        self.assertError(404)
        self.connect()
        self.send("GET", "path=/etc")
        self.streams[-1].deliver(encode_head({"ok": False, "error": "is_a_directory",
                                              "message": "/etc: must specify a file not a directory"}))
        self.streams[-1].end()
        self.assertError(400, "must specify a file not a directory")

    def download_head(self, query: str, accept: str, result: dict[str, Any]) -> Any:
        self.connect()
        self.send("GET", query, headers=f"Accept: {accept}\r\n")
        stream = self.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": result}) + b"DATA")
        stream.end()
        return stream

    def test_download_recursive(self) -> None:
        """cp-v1-recursive: a file is raw bytes (with its length), a directory a tar; the header says recursive."""
        both = "application/octet-stream, application/x-tar"
        stream = self.download_head("path=/etc/hosts&mode=cp-v1-recursive&copy_semantics=cp-v1", both,
                                    {"type": "file", "name": "hosts", "mode": 0o644, "size": 4})
        self.assertEqual(stream.header, {"op": "cp-download", "path": "/etc/hosts", "mode": "recursive",
                                         "semantics": "cp-v1"})
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-type"], headers[b"content-length"], body),
                         (200, b"application/octet-stream", b"4", b"DATA"))
        self.assertEqual((headers[b"x-slicer-source-type"], headers[b"x-slicer-source-name-base64"]),
                         (b"file", b"aG9zdHM"))
        self.download_head("path=/etc&mode=cp-v1-recursive&copy_semantics=cp-v1", both,
                           {"type": "directory", "name": "etc", "mode": 0o755, "size": None})
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-type"], headers[b"x-slicer-source-type"],
                          headers[b"x-slicer-file-mode"], body),
                         (200, b"application/x-tar", b"directory", b"0755", b"DATA"))
        self.assertNotIn(b"content-length", headers)

    def test_download_cp_v1_tar(self) -> None:
        """cp-v1-tar asks the guest for a directory's tar with excludes and uid; a file's refusal is a 400."""
        self.send("GET", "path=~/src&mode=cp-v1-tar&copy_semantics=cp-v1&exclude=*.o&exclude=build/&uid=1000",
                  headers="Accept: application/x-tar\r\n")
        stream = self.streams[-1]
        self.assertEqual(stream.header, {"op": "cp-download", "path": "~/src", "mode": "tar", "semantics": "cp-v1",
                                         "exclude": ["*.o", "build/"], "uid": 1000})
        stream.deliver(encode_head({"ok": False, "error": "not_a_directory", "message": "~/src: is a file"}))
        stream.end()
        self.assertEqual(self.assertError(400, "is a file")["code"], "not_a_directory")

    def test_download_root_has_no_name(self) -> None:
        """The root directory has no name: the name header is left out (clients allow it for copy-contents)."""
        self.download_head("path=/&mode=cp-v1-tar", "application/x-tar",
                           {"type": "directory", "name": "/", "mode": 0o755, "size": None})
        status, headers, _ = self.response()
        self.assertEqual((status, headers[b"x-slicer-source-type"]), (200, b"directory"))
        self.assertNotIn(b"x-slicer-source-name-base64", headers)

    def test_download_slow_client(self) -> None:
        """The HTTP transport pausing its producer pauses the stream (no credit for the guest)."""
        self.send("GET", "path=/f")
        stream = self.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o600, "size": None}}))
        self.transport.producer.pauseProducing()
        self.assertTrue(stream.paused)
        self.transport.producer.resumeProducing()
        self.assertFalse(stream.paused)

    def test_download_interrupted_aborts(self) -> None:
        """A reset after the headers drops the connection without the final chunk."""
        self.send("GET", "path=/f")
        stream = self.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o600,
                                                           "size": None}}) + b"part")
        stream.end(Failure(StreamReset(ResetCode.INTERNAL_ERROR, "disk")))
        self.assertTrue(self.transport.disconnecting)
        self.assertFalse(self.transport.value().endswith(b"0\r\n\r\n"))
        self.flushLoggedErrors()

    def test_download_head_values_made_safe(self) -> None:
        """
        A guest's head whose values the headers cannot carry (a type that is not ASCII, a name with a
        surrogate no file name has or a separator, a mode beyond the permission bits, a size that is no
        count of bytes) still gets a valid response, never a 500: the type is ``file``, the name header
        is left out, the mode is its permission bits, and the length is the stream's (chunked).
        """
        for result, mode, length in (
                ({"type": "f\u00efle", "name": "f", "mode": 0o644, "size": 4}, b"0644", b"4"),
                ({"type": "file", "name": "\ud800", "mode": 0o644, "size": 4}, b"0644", b"4"),
                ({"type": "file", "name": "../../etc/passwd", "mode": 0o644, "size": 4}, b"0644", b"4"),
                ({"type": "file", "name": "x" * 256, "mode": 0o644, "size": 4}, b"0644", b"4"),
                ({"type": "file", "name": "f\u0000", "mode": 0o644, "size": 4}, b"0644", b"4"),
                ({"type": "file", "name": "f", "mode": 2**70 + 0o640, "size": 4}, b"0640", b"4"),
                ({"type": "file", "name": "f", "mode": -1, "size": 4}, b"7777", b"4"),
                ({"type": "file", "name": "f", "mode": 0o644, "size": -4}, b"0644", None),
                ({"type": "file", "name": "f", "mode": 0o644, "size": True}, b"0644", None),
                ({"type": "file", "name": "f", "mode": 0o644, "size": 2**64}, b"0644", None),
                ({"type": "file", "name": "f", "mode": 0o644, "size": "4"}, b"0644", None)):
            self.connect()
            self.send("GET", "path=/f")
            stream = self.streams[-1]
            stream.deliver(encode_head({"ok": True, "result": result}) + b"DATA")
            stream.end()
            status, headers, body = self.response()
            self.assertEqual((status, body), (200, b"DATA"), result)
            self.assertEqual(headers[b"x-slicer-source-type"], b"file")
            self.assertEqual(headers[b"x-service-file-mode"], mode)
            self.assertEqual(headers.get(b"content-length"), length, result)
            if result["name"] != "f":
                self.assertNotIn(b"x-slicer-source-name-base64", headers)
            self.assertFalse(self.transport.disconnecting, result)
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_download_shorter_than_declared_aborts(self) -> None:
        """
        A guest that ends a file's stream cleanly before the size its head gave (the Content-Length) makes
        the connection abort: the client sees a truncated body, not a finished response that would leave it
        waiting for the rest (or read the next response as it).
        """
        self.send("GET", "path=/f")
        stream = self.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o600, "size": 10}})
                       + b"part")
        stream.end()
        self.assertTrue(self.transport.disconnecting)
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-length"], body), (200, b"10", b"part"))
        self.flushLoggedErrors()

    def test_download_longer_than_declared_cut(self) -> None:
        """
        A guest that sends more than the size its head gave: the response gets exactly that many bytes (a
        byte more would be read as the start of the next response), the guest's stream is reset and the
        connection aborted; what the guest sends after is dropped.
        """
        self.send("GET", "path=/f")
        stream = self.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o600, "size": 5}})
                       + b"he")
        stream.deliver(b"llo, and more")
        stream.deliver(b"and more still")
        self.assertEqual(stream.aborted[0], ResetCode.PROTOCOL_ERROR)
        self.assertTrue(self.transport.disconnecting)
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-length"], body), (200, b"5", b"hello"))
        self.flushLoggedErrors()

    def test_download_longer_in_the_first_chunk(self) -> None:
        """The same when the extra bytes come with the head itself (before anything is written)."""
        self.send("GET", "path=/f")
        stream = self.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o600, "size": 3}})
                       + b"abcdef")
        self.assertEqual(stream.aborted[0], ResetCode.PROTOCOL_ERROR)
        self.assertTrue(self.transport.disconnecting)
        status, headers, body = self.response()
        self.assertEqual((status, headers[b"content-length"], body), (200, b"3", b"abc"))
        self.flushLoggedErrors()

    def test_download_client_gone(self) -> None:
        """A client that disconnects mid-download resets the stream."""
        self.send("GET", "path=/f")
        stream = self.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o600, "size": None}}))
        self.channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)

    def test_predicate(self) -> None:
        """Only POST /vm/<h>/cp streams its body (the route's flag, matched like the route)."""
        self.assertTrue(self.api.streams_body(b"POST", b"/vm/a/cp", Headers()))
        self.assertTrue(self.api.streams_body(b"POST", b"/vm/a/cp?path=/x&mode=tar", Headers()))
        self.assertFalse(self.api.streams_body(b"GET", b"/vm/a/cp", Headers()))
        self.assertFalse(self.api.streams_body(b"POST", b"/vm/a/cpx", Headers()))
        self.assertFalse(self.api.streams_body(b"POST", b"/vm/a%FF/cp", Headers()))

    def test_name_header(self) -> None:
        """The name header is base64url without padding, also for names that need '-' and '_'."""
        self.assertEqual(name_header("hosts"), b"aG9zdHM")
        self.assertEqual(name_header("\xff\xfe>?"), b"w7_Dvj4_")


class StubTreqTests(SynchronousTestCase):
    """A whole upload and download through treq's StubTreq (a real Agent and Site in memory)."""

    def test_round_trip(self) -> None:
        """An upload answers 200 JSON and a download returns the bytes, through treq."""
        fleet = OneNodeFleet()
        api = Api(MemoryReactorClock(), CopyApi(fleet).routes(), Metrics(), None)  # type: ignore[arg-type]
        treq = StubTreq(api.resource())
        d = treq.post("http://x/vm/demo-1/cp?path=/f", data=b"payload")
        treq.flush()
        stream = fleet.agent.streams[-1]
        self.assertEqual((bytes(stream.written), stream.half_closed), (b"payload", True))
        stream.deliver(_ok(path="/f", size=7))
        stream.protocol.readConnectionLost()
        treq.flush()
        response = self.successResultOf(d)
        self.assertEqual(response.code, 200)
        self.assertEqual(json.loads(self.successResultOf(response.content()))["size"], 7)
        d = treq.get("http://x/vm/demo-1/cp?path=/f")
        treq.flush()
        stream = fleet.agent.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o600, "size": 7}})
                       + b"payload")
        stream.end()
        treq.flush()
        response = self.successResultOf(d)
        self.assertEqual(self.successResultOf(response.content()), b"payload")
