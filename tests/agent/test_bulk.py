# -*- test-case-name: tests.agent.test_bulk -*-
"""
The host's end of copies over the bulk port (:mod:`vmservice.agent.bulk`,
:mod:`vmservice.agent.bulkcopy`) with a memory reactor, string transports for
the port's socket and fake streams: the token, content after the guest's
echo of it, the upload's end, the fall-backs (busy, refused, an older agent,
an older head) and a port lost mid-download.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import FakeExecAgent, RecordingProducer, complete_port_connection
from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.agent.bulk import WRITE_BUFFER, BulkChannel, BulkLink
from vmservice.agent.bulk_upload_state import BULK_UPLOAD_MACHINE, HELD_HIGH_WATER
from vmservice.agent.bulkcopy import BulkDownload, BulkUpload
from vmservice.agent.stream import StreamReset
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.files import DownloadRequest, UploadRequest, UploadResult
from vmservice.wire import ResetCode
from vmservice.wire.bulk import decode_upload_end
from vmservice.wire.payloads import encode_head


class _BulkAgent(FakeExecAgent):
    def __init__(self, channel: BulkChannel) -> None:
        super().__init__()
        self.bulk_channel = channel


class _Case(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        directory = tempfile.mkdtemp(prefix="vms-bulk-", dir="/tmp")
        self.path = os.path.join(directory, "bulk.sock")
        open(self.path, "w").close()  # stands in for QEMU's socket: the channel looks for it
        self.addCleanup(os.rmdir, directory)
        self.addCleanup(os.unlink, self.path)
        self.channel = BulkChannel(self.reactor, self.path)
        self.agent = _BulkAgent(self.channel)

    def connect(self) -> tuple[BulkLink, StringTransport]:
        """Complete the newest connection to the port's socket."""
        return complete_port_connection(self.reactor)


class DownloadTests(_Case):
    def test_content_over_the_port(self) -> None:
        """The head says bulk: the token goes out, what follows the guest's echo of it is the content."""
        download = self.agent.download(DownloadRequest(path="/f"))
        self.assertIsInstance(download, BulkDownload)
        link, transport = self.connect()
        stream = self.agent.streams[-1]
        self.assertEqual(stream.header, {"op": "cp-download", "path": "/f", "mode": "binary",
                                         "bulk": link.token.hex()})
        self.assertTrue(stream.half_closed)
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o644,
                                                           "size": 6, "bulk": True}}))
        self.assertEqual(self.successResultOf(download.head).size, 6)
        self.assertEqual(transport.value(), link.token)
        got: list[bytes] = []
        download.deliver_to(got.append)
        link.dataReceived(b"stale" + link.token + b"abc")
        stream.end()
        self.assertNoResult(download.done)
        link.dataReceived(b"def")
        self.successResultOf(download.done)
        self.assertEqual(b"".join(got), b"abcdef")
        self.assertTrue(transport.disconnecting)

    def test_older_agent(self) -> None:
        """A head without bulk: the link is dropped, the content comes on the stream."""
        download = self.agent.download(DownloadRequest(path="/f"))
        link, transport = self.connect()
        stream = self.agent.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o644, "size": 2}}),
                       b"hi")
        self.assertTrue(transport.disconnecting)
        got: list[bytes] = []
        download.deliver_to(got.append)
        stream.end()
        self.successResultOf(download.done)
        self.assertEqual(got, [b"hi"])

    def test_bulk_head_without_a_usable_size(self) -> None:
        """
        A bulk head whose size is no count of bytes (negative, a boolean) does not take the port: the
        link is dropped, the head has no size, and what comes on the stream is the content, whole.
        """
        for size in (-5, True):
            download = self.agent.download(DownloadRequest(path="/f"))
            link, transport = self.connect()
            stream = self.agent.streams[-1]
            stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o644,
                                                               "size": size, "bulk": True}}), b"whole content")
            self.assertIsNone(self.successResultOf(download.head).size)
            self.assertTrue(transport.disconnecting, size)
            got: list[bytes] = []
            download.deliver_to(got.append)
            stream.end()
            self.successResultOf(download.done)
            self.assertEqual(b"".join(got), b"whole content", size)
            link.connectionLost(Failure(ConnectionError()))

    def test_port_lost(self) -> None:
        """The port closing before the content is whole interrupts the copy and resets the stream."""
        download = self.agent.download(DownloadRequest(path="/f"))
        link, transport = self.connect()
        stream = self.agent.streams[-1]
        stream.deliver(encode_head({"ok": True, "result": {"type": "file", "name": "f", "mode": 0o644,
                                                           "size": 10, "bulk": True}}))
        download.deliver_to(lambda data: None)
        link.dataReceived(link.token + b"abc")
        link.connectionLost(Failure(ConnectionError()))
        self.assertEqual(self.failureResultOf(download.done, AgentError).value.kind, GuestErrorKind.INTERRUPTED)
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)
        self.assertFalse(self.channel.busy)

    def test_busy(self) -> None:
        """While a copy holds the port, others take their streams."""
        self.agent.download(DownloadRequest(path="/a"))
        self.connect()
        other = self.agent.download(DownloadRequest(path="/b"))
        self.assertNotIsInstance(other, BulkDownload)
        self.assertNotIn("bulk", self.agent.streams[-1].header)

    def test_back_pressure(self) -> None:
        """A paused consumer pauses the port's socket."""
        download = self.agent.download(DownloadRequest(path="/f"))
        link, transport = self.connect()
        self.agent.streams[-1].deliver(encode_head({"ok": True, "result": {
            "type": "file", "name": "f", "mode": 0o644, "size": 10, "bulk": True}}))
        download.deliver_to(lambda data: None)
        download.pauseProducing()
        self.assertEqual(transport.producerState, "paused")
        download.resumeProducing()
        self.assertEqual(transport.producerState, "producing")


class UploadTests(_Case):
    def start(self) -> tuple[Any, BulkLink, StringTransport, Any]:
        upload = self.agent.upload(UploadRequest(path="/f"))
        self.assertIsInstance(upload, BulkUpload)
        link, transport = self.connect()
        return upload, link, transport, self.agent.streams[-1]

    def test_diagram(self) -> None:
        """docs/state-machines/bulk-upload.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("bulk-upload.dot"), machine_transitions(BULK_UPLOAD_MACHINE))

    def test_write_buffer(self) -> None:
        """The port's connection buffers a megabyte before it pauses the body that writes to it."""
        _, _, transport, _ = self.start()
        self.assertEqual(WRITE_BUFFER, 1 << 20)
        self.assertEqual(getattr(transport, "bufferSize"), WRITE_BUFFER)

    def test_body_over_the_port(self) -> None:
        """Held until the guest's head, then token and body on the port, the size and HALF_CLOSE on the stream."""
        upload, link, transport, stream = self.start()
        self.assertEqual(stream.header["op"], "cp-upload-bulk")
        self.assertEqual(stream.header["bulk"], link.token.hex())
        upload.write(b"abc")
        self.assertEqual(transport.value(), b"")
        stream.deliver(encode_head({"ok": True, "bulk": True}))
        upload.write(b"de")
        upload.end()
        self.assertEqual(transport.value(), link.token + b"abcde")
        self.assertEqual(decode_upload_end(bytes(stream.written)), 5)
        self.assertTrue(stream.half_closed)
        stream.deliver(json.dumps({"ok": True, "result": {"path": "/f", "size": 5}}).encode())
        stream.end()
        self.assertEqual(self.successResultOf(upload.result), UploadResult(path="/f", size=5))
        self.assertTrue(transport.disconnecting)

    def test_refused(self) -> None:
        """REFUSED before the head (the guest's port is busy): the body goes on a cp-upload stream."""
        upload, link, transport, stream = self.start()
        upload.write(b"abc")
        stream.end(Failure(StreamReset(ResetCode.REFUSED, "busy")))
        fallback = self.agent.streams[-1]
        self.assertEqual(fallback.header["op"], "cp-upload")
        upload.write(b"d")
        upload.end()
        self.assertEqual((bytes(fallback.written), fallback.half_closed), (b"abcd", True))
        self.assertTrue(self.channel.supported)
        fallback.deliver(json.dumps({"ok": True, "result": {"path": "/f", "size": 4}}).encode())
        fallback.end()
        self.assertEqual(self.successResultOf(upload.result).size, 4)

    def test_older_agent(self) -> None:
        """UNKNOWN_OP: fall back, and try the port no more."""
        upload, link, transport, stream = self.start()
        stream.end(Failure(StreamReset(ResetCode.UNKNOWN_OP, "unknown op")))
        self.assertEqual(self.agent.streams[-1].header["op"], "cp-upload")
        self.assertFalse(self.channel.supported)
        self.assertNotIsInstance(self.agent.upload(UploadRequest(path="/g")), BulkUpload)

    def test_error_reply(self) -> None:
        """The guest's error reply fails the result."""
        upload, link, transport, stream = self.start()
        stream.deliver(encode_head({"ok": True, "bulk": True}),
                       json.dumps({"ok": False, "error": "is_a_directory", "message": "/f"}).encode())
        stream.end()
        self.failureResultOf(upload.result, AgentError)
        self.assertTrue(transport.disconnecting)

    def test_abort(self) -> None:
        """Abort resets the stream and drops the link."""
        upload, link, transport, stream = self.start()
        stream.deliver(encode_head({"ok": True, "bulk": True}))
        upload.abort()
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)
        self.assertTrue(transport.disconnecting)
        self.failureResultOf(upload.result, AgentError)

    def test_no_socket(self) -> None:
        """Without the port's socket, copies take their streams."""
        os.unlink(self.path)
        open(self.path + ".x", "w").close()
        self.addCleanup(os.unlink, self.path + ".x")
        self.addCleanup(lambda: open(self.path, "w").close())
        self.assertNotIsInstance(self.agent.upload(UploadRequest(path="/f")), BulkUpload)
        self.assertNotIsInstance(self.agent.download(DownloadRequest(path="/f")), BulkDownload)

    def test_held_end_and_producer(self) -> None:
        """
        A producer is paused once more than the high water is held; when the guest takes the port, the
        held body, then the producer (resumed), then the held end go to it.
        """
        upload, link, transport, stream = self.start()
        producer = RecordingProducer()
        upload.register_producer(producer)
        upload.write(b"x" * (HELD_HIGH_WATER + 1))
        upload.end()
        self.assertEqual(producer.calls, ["pause"])
        stream.deliver(encode_head({"ok": True, "bulk": True}))
        self.assertEqual(producer.calls, ["pause", "resume"])
        self.assertIs(transport.producer, producer)
        self.assertEqual(len(transport.value()), len(link.token) + HELD_HIGH_WATER + 1)
        self.assertEqual(decode_upload_end(bytes(stream.written)), HELD_HIGH_WATER + 1)

    def test_bad_head(self) -> None:
        """A head that does not say bulk resets the stream and fails the result."""
        upload, link, transport, stream = self.start()
        stream.deliver(encode_head({"ok": True}))
        self.assertEqual(stream.aborted[0], ResetCode.PROTOCOL_ERROR)
        self.failureResultOf(upload.result, AgentError)
        self.assertTrue(transport.disconnecting)

    def test_abort_before_the_link(self) -> None:
        """Aborted while the link connects: the link is closed once connected, and no stream is opened."""
        upload = self.agent.upload(UploadRequest(path="/f"))
        upload.abort()
        link, transport = self.connect()
        self.assertEqual(self.agent.streams, [])
        self.assertTrue(transport.disconnecting)


class UploadWriteTests(_Case):
    """What body bytes do in each state of the upload's machine (set by its transitions)."""

    def start(self) -> tuple[Any, BulkLink, StringTransport, Any]:
        upload = self.agent.upload(UploadRequest(path="/f"))
        link, transport = self.connect()
        return upload, link, transport, self.agent.streams[-1]

    def test_dropped_once_aborted(self) -> None:
        """After an abort, writes go nowhere: not on the link, not on the stream."""
        upload, link, transport, stream = self.start()
        stream.deliver(encode_head({"ok": True, "bulk": True}))
        upload.write(b"ab")
        upload.abort()
        upload.write(b"cd")
        self.assertEqual((transport.value(), bytes(stream.written)), (link.token + b"ab", b""))
        self.failureResultOf(upload.result, AgentError)

    def test_dropped_once_failed(self) -> None:
        """A head that does not say bulk fails the upload: what was held and what comes are dropped."""
        upload, link, transport, stream = self.start()
        upload.write(b"ab")
        stream.deliver(encode_head({"ok": True}))
        upload.write(b"cd")
        self.assertEqual((transport.value(), bytes(stream.written)), (b"", b""))
        self.failureResultOf(upload.result, AgentError)

    def test_sent_while_finishing(self) -> None:
        """Bytes after the end still go on the link, as while Bulk."""
        upload, link, transport, stream = self.start()
        stream.deliver(encode_head({"ok": True, "bulk": True}))
        upload.end()
        upload.write(b"z")
        self.assertEqual(transport.value(), link.token + b"z")

    def test_written_on_resume_after_held(self) -> None:
        """A producer that writes as it is resumed on entering Bulk: its bytes follow the held ones on the link."""
        upload, link, transport, stream = self.start()

        class Writing(RecordingProducer):
            def resumeProducing(self) -> None:
                super().resumeProducing()
                upload.write(b"new")

        producer = Writing()
        upload.register_producer(producer)
        upload.write(b"x" * (HELD_HIGH_WATER + 1))
        stream.deliver(encode_head({"ok": True, "bulk": True}))
        self.assertEqual(producer.calls, ["pause", "resume"])
        self.assertEqual(transport.value(), link.token + b"x" * (HELD_HIGH_WATER + 1) + b"new")
