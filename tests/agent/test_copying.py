# -*- test-case-name: tests.agent.test_copying -*-
"""
The host's end of copy streams (:mod:`vmservice.agent.copying`) over fake
streams: OPEN headers, upload replies (also early ones), the download head,
content held until there is a writer, flow control and error mapping.
"""

from __future__ import annotations

import json

from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import FakeExecAgent
from tests.diagrams import drawn_transitions, machine_transitions
from twisted.internet.defer import Deferred

from vmservice.agent.copying import start_download, start_upload
from vmservice.agent.download_state import DOWNLOAD_MACHINE
from vmservice.agent.stream import StreamReset
from vmservice.errors import (
    AgentError,
    AgentNotConnected,
    BadRequest,
    GuestErrorKind,
    InsufficientStorage,
    Internal,
    NotFound,
    NotSupported,
    ServiceError,
    service_error,
)
from vmservice.guestport.files import DownloadHead, DownloadRequest, UploadRequest, UploadResult
from vmservice.wire.payloads import encode_head
from vmservice.wire import ResetCode


class UploadTests(SynchronousTestCase):
    """:func:`start_upload`."""

    def setUp(self) -> None:
        self.agent = FakeExecAgent()

    def start(self, **fields: object) -> tuple[object, object]:
        upload = start_upload(self.agent, UploadRequest(path="/x", **fields))  # type: ignore[arg-type]
        return upload, self.agent.streams[-1]

    def test_header_and_body(self) -> None:
        """The header carries every field; body bytes are written and end() half-closes."""
        upload, stream = self.start(mode="tar", uid=5, gid=None, permissions=0o700)
        self.assertEqual(stream.header, {"op": "cp-upload", "path": "/x", "mode": "tar", "uid": 5, "gid": None,
                                         "permissions": 0o700})
        upload.write(b"abc")
        upload.end()
        self.assertEqual((bytes(stream.written), stream.half_closed), (b"abc", True))

    def test_cp_v1_header(self) -> None:
        """cp-v1 fields, excludes and the unpacked size join the header only when they say something."""
        upload, stream = self.start(mode="tar", semantics="cp-v1", source_name="src", copy_contents=True,
                                    exclude=("*.log", "tmp"), unpacked_size=0)
        self.assertEqual(stream.header, {"op": "cp-upload", "path": "/x", "mode": "tar", "uid": None, "gid": None,
                                         "permissions": None, "semantics": "cp-v1", "source_name": "src",
                                         "copy_contents": True, "exclude": ["*.log", "tmp"], "unpacked_size": 0})

    def test_guest_kinds_are_named(self) -> None:
        """Every error kind the guest's copy may answer has its own mapping (only io_error is a plain fs_error)."""
        from vmservice.guest.copying import ERROR_KINDS

        for kind in ERROR_KINDS:
            mapped = GuestErrorKind.of_guest(kind)
            self.assertEqual(mapped is GuestErrorKind.FS_ERROR, kind == "io_error", kind)

    def test_result(self) -> None:
        """The guest's reply, once it half-closes, is the result."""
        upload, stream = self.start()
        stream.deliver(json.dumps({"ok": True, "result": {"path": "/x", "size": 3}}).encode())
        self.assertNoResult(upload.result)
        stream.protocol.readConnectionLost()
        self.assertEqual(self.successResultOf(upload.result), UploadResult(path="/x", size=3))

    def test_errors_mapped(self) -> None:
        """Copy kinds are 400s, fs kinds keep their mapping."""
        for kind, error, code in (("unsafe_entry", BadRequest, "unsafe_entry"),
                                  ("is_a_directory", BadRequest, "is_a_directory"),
                                  ("bad_archive", BadRequest, "bad_archive"),
                                  ("missing_destination", BadRequest, "missing_destination"),
                                  ("no_space", InsufficientStorage, "insufficient_storage"),
                                  ("not_found", NotFound, "not_found"), ("io_error", Internal, "fs_error")):
            upload, stream = self.start()
            stream.deliver(json.dumps({"ok": False, "error": kind, "message": "m"}).encode())
            stream.protocol.readConnectionLost()
            self.assertEqual(failed_as(self, upload.result, error).code, code)

    def test_lost(self) -> None:
        """A lost channel is 503, an unknown op 501, a reset 500, and abort() resets with CANCEL."""
        for reason, error in ((ConnectionLost(), AgentNotConnected), (StreamReset(ResetCode.UNKNOWN_OP, ""), NotSupported),
                              (StreamReset(ResetCode.PEER_RESTARTED, ""), AgentNotConnected),
                              (StreamReset(ResetCode.INTERNAL_ERROR, "x"), Internal)):
            upload, stream = self.start()
            stream.end(Failure(reason))
            failed_as(self, upload.result, error)
        upload, stream = self.start()
        upload.abort()
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)
        failed_as(self, upload.result, Internal)


def failed_as(case: SynchronousTestCase, d: Deferred[object], kind: type[ServiceError]) -> ServiceError:
    """The service error ``d``'s agent error means for a client, checked to be a ``kind``."""
    error = service_error(case.failureResultOf(d, AgentError).value)
    case.assertIsInstance(error, kind)
    return error


class DownloadTests(SynchronousTestCase):
    """:func:`start_download`."""

    def setUp(self) -> None:
        self.agent = FakeExecAgent()
        self.download = start_download(self.agent, DownloadRequest(path="/etc", mode="tar"))
        self.stream = self.agent.streams[-1]

    def head(self, **result: object) -> bytes:
        return encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o640, "size": 5, **result}})

    def test_diagram(self) -> None:
        """docs/state-machines/download.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("download.dot"), machine_transitions(DOWNLOAD_MACHINE))

    def test_cp_v1_header(self) -> None:
        """Semantics, excludes and uid join the header only when given."""
        start_download(self.agent, DownloadRequest(path="~/d", mode="recursive", semantics="cp-v1", exclude=("x",),
                                                   uid=7))
        self.assertEqual(self.agent.streams[-1].header, {"op": "cp-download", "path": "~/d", "mode": "recursive",
                                                         "semantics": "cp-v1", "exclude": ["x"], "uid": 7})

    def test_header_and_half_close(self) -> None:
        """The OPEN header names path and mode; the host half-closes at once."""
        self.assertEqual(self.stream.header, {"op": "cp-download", "path": "/etc", "mode": "tar"})
        self.assertTrue(self.stream.half_closed)
        self.assertFalse(self.stream.paused)

    def test_head_then_content(self) -> None:
        """Content that arrives with the head is held (the stream paused) until a writer is given."""
        self.stream.deliver(self.head() + b"hel")
        self.assertEqual(self.successResultOf(self.download.head), DownloadHead("file", "f", 0o640, 5))
        self.assertTrue(self.stream.paused)
        out: list[bytes] = []
        self.download.deliver_to(out.append)
        self.assertFalse(self.stream.paused)
        self.stream.deliver(b"lo")
        self.assertNoResult(self.download.done)
        self.stream.end()
        self.successResultOf(self.download.done)
        self.assertEqual(b"".join(out), b"hello")

    def test_head_split(self) -> None:
        """A head split over many DATA is parsed once whole."""
        data = self.head()
        for byte in data:
            self.assertNoResult(self.download.head)
            self.stream.deliver(bytes([byte]))
        self.successResultOf(self.download.head)

    def test_back_pressure(self) -> None:
        """Pausing the download pauses the stream (withholds credit); resuming resumes it."""
        self.stream.deliver(self.head())
        self.download.deliver_to(lambda data: None)
        self.download.pauseProducing()
        self.assertTrue(self.stream.paused)
        self.download.resumeProducing()
        self.assertFalse(self.stream.paused)
        self.download.stopProducing()
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)

    def test_error_head(self) -> None:
        """An error head fails the head with the mapped error."""
        self.stream.deliver(encode_head({"ok": False, "error": "is_a_directory", "message": "must specify a file"}))
        self.stream.end()
        self.assertEqual(failed_as(self, self.download.head, BadRequest).code, "is_a_directory")

    def test_interrupted(self) -> None:
        """A reset after the head fails done with an agent error of kind INTERRUPTED."""
        self.stream.deliver(self.head() + b"he")
        self.download.deliver_to(lambda data: None)
        self.stream.end(Failure(StreamReset(ResetCode.INTERNAL_ERROR, "disk")))
        self.assertIs(self.failureResultOf(self.download.done, AgentError).value.kind, GuestErrorKind.INTERRUPTED)

    def test_lost_before_head(self) -> None:
        """A channel lost before the head fails the head with 503; a bad head resets the stream."""
        self.stream.end(Failure(ConnectionLost()))
        failed_as(self, self.download.head, AgentNotConnected)
        download = start_download(self.agent, DownloadRequest(path="/x"))
        stream = self.agent.streams[-1]
        stream.deliver(b"\x00\x00\x00\x02[]")
        failed_as(self, download.head, Internal)
        self.assertEqual(stream.aborted[0], ResetCode.PROTOCOL_ERROR)

    def test_all_content_before_the_writer(self) -> None:
        """Content that all came before the writer is delivered to it, then done fires."""
        self.stream.deliver(self.head() + b"hello")
        self.stream.end()
        self.assertNoResult(self.download.done)
        out: list[bytes] = []
        self.download.deliver_to(out.append)
        self.successResultOf(self.download.done)
        self.assertEqual((out, self.download.delivered), ([b"hello"], 5))

    def test_more_than_declared(self) -> None:
        """Content past the head's size is cut: what fits is delivered, done fails, the stream is reset."""
        self.stream.deliver(self.head())
        out: list[bytes] = []
        self.download.deliver_to(out.append)
        self.stream.deliver(b"hello, world")
        self.assertEqual(out, [b"hello"])
        self.assertIs(self.failureResultOf(self.download.done, AgentError).value.kind, GuestErrorKind.INTERRUPTED)
        self.assertEqual(self.stream.aborted[0], ResetCode.PROTOCOL_ERROR)

    def test_fewer_than_declared(self) -> None:
        """A clean end short of the head's size fails done."""
        self.stream.deliver(self.head() + b"hel")
        self.download.deliver_to(lambda data: None)
        self.stream.end()
        error = self.failureResultOf(self.download.done, AgentError).value
        self.assertIn("after 3 of the 5 bytes", str(error))

    def test_abort_after_head(self) -> None:
        """An abort resets the stream with CANCEL and leaves done unfired, whatever comes after."""
        self.stream.deliver(self.head() + b"he")
        self.download.abort()
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)
        self.download.deliver_to(lambda data: None)
        self.download.abort()
        self.assertNoResult(self.download.done)

    def test_abort_error_head(self) -> None:
        """Aborting after an error head resets the stream the guest has not ended yet."""
        self.stream.deliver(encode_head({"ok": False, "error": "not_found", "message": "m"}))
        failed_as(self, self.download.head, NotFound)
        self.download.abort()
        self.assertEqual(self.stream.aborted[0], ResetCode.CANCEL)
