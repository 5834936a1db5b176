# -*- test-case-name: tests.agent.test_bulk -*-
"""
Binary copies over a guest's bulk port (:mod:`.bulk`), with the copy's
multiplexed stream for the head, the reply and the end: the same
:class:`~vmservice.guestport.files.IUpload` and
:class:`~vmservice.guestport.files.IDownload` as :mod:`.copying`, which
they fall back to when the port is busy, missing or not served by the agent
(``docs/agent-protocol.md``, "The bulk port").

- :class:`BulkUpload`: OPEN ``cp-upload-bulk`` with the link's token; the
  body is held until the guest's head ``{"ok": true, "bulk": true}`` says it
  holds the port, then the token and the body go on the link, and once the
  body ended ``{"size": N}`` and HALF_CLOSE on the stream; the reply is the
  ``cp-upload`` one.  A RESET before that head (``REFUSED``: the guest's port
  is busy; ``UNKNOWN_OP``: an older agent) sends the body as a ``cp-upload``.
- :class:`BulkDownload`: OPEN ``cp-download`` with ``"bulk": TOKEN``; a head
  with ``"bulk": true`` means the content comes on the link (exactly
  ``size`` bytes after the guest's echo of the token), else on the stream as
  before (an older agent ignores the field).
"""

from __future__ import annotations

from typing import Any, Optional, cast

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from ..errors import AgentError, GuestErrorKind
from ..guestport.files import DownloadRequest, IUpload, UploadRequest, UploadResult, usable_size
from ..wire import ResetCode
from ..wire.bulk import encode_upload_end
from ..wire.payloads import decode_head
from .bulk import BulkChannel, BulkLink
from .channel import Channel
from .copying import (
    GuestDownload,
    GuestUpload,
    _DownloadProtocol,
    _UploadProtocol,
    start_upload,
)
from .errors import stream_error
from .stream import AgentStream, StreamReset

#: Bytes of body held while the guest has not said how it takes them.
HELD_HIGH_WATER = 1024 * 1024


@implementer(IHalfCloseableProtocol)
class _BulkUploadProtocol(Protocol):
    """The guest's head (it holds the port), then its reply as for ``cp-upload``."""

    def __init__(self, owner: "BulkUpload") -> None:
        self._owner = owner
        self._buffer = b""
        self._headed = False
        self.reply = _UploadProtocol()

    def connectionMade(self) -> None:
        self.reply.transport = self.transport

    def dataReceived(self, data: bytes) -> None:
        if self._headed:
            self.reply.dataReceived(data)
            return
        self._buffer += data
        try:
            decoded = decode_head(self._buffer)
        except ValueError:
            decoded = ({}, len(self._buffer))
        if decoded is None:
            return
        head, used = decoded
        rest, self._buffer = self._buffer[used:], b""
        self._headed = True
        if head.get("ok") is not True or head.get("bulk") is not True:
            cast(AgentStream, self.transport).abortConnection(ResetCode.PROTOCOL_ERROR, "bad bulk head")
            return
        self._owner._accepted()
        if rest:
            self.reply.dataReceived(rest)

    def readConnectionLost(self) -> None:
        if self._headed:
            self.reply.readConnectionLost()

    def writeConnectionLost(self) -> None:
        pass

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        if self._headed:
            self.reply.connectionLost(reason)
        else:
            self._owner._refused(reason)


@implementer(IUpload)
class BulkUpload:
    """An upload over the bulk port (or, when the guest refuses it, its stream)."""

    def __init__(self, agent: Channel, channel: BulkChannel, request: UploadRequest) -> None:
        self._agent = agent
        self._channel = channel
        self._request = request
        self._link: Optional[BulkLink] = None
        self._stream: Optional[AgentStream] = None
        self._fallback: Optional[GuestUpload] = None
        self._bulk = False
        self._held: list[bytes] = []
        self._held_size = 0
        self._sent = 0
        self._producer: Optional[IPushProducer] = None
        self._producer_paused = False
        self._ended = False
        self._aborted = False
        self.result: Deferred[UploadResult] = Deferred()

    async def open(self) -> None:
        """Connect the link and open the stream (or fall back at once)."""
        link = await self._channel.connect()
        if self._aborted:
            if link is not None:
                link.close()
            return
        if link is None:
            self._fall_back()
            return
        self._link = link
        header = {**self._request.to_json(), "op": "cp-upload-bulk", "bulk": link.token.hex()}
        protocol = _BulkUploadProtocol(self)
        try:
            self._stream = self._agent.open_stream(header, protocol)
        except AgentError as e:
            link.close()
            self._settle(Failure(e))
            return
        protocol.reply.reply.addBoth(self._replied)

    # -- the guest's answers ------------------------------------------------------------

    def _accepted(self) -> None:
        link = self._link
        if link is None or self._aborted:
            return
        self._bulk = True
        link.start()
        held, self._held, self._held_size = self._held, [], 0
        for chunk in held:
            self._send(chunk)
        if self._producer is not None:
            link.transport.registerProducer(self._producer, True)  # type: ignore[attr-defined]
            self._resume_producer()
        if self._ended:
            self._finish()

    def _refused(self, reason: Failure) -> None:
        if self._link is not None:
            self._link.close()
        if self._aborted:
            return
        error = reason.value
        if isinstance(error, StreamReset) and error.code in (ResetCode.REFUSED, ResetCode.UNKNOWN_OP):
            if error.code == ResetCode.UNKNOWN_OP:
                self._channel.supported = False
            self._fall_back()
            return
        self._settle(Failure(stream_error(reason, "the copy")))

    def _replied(self, outcome: Any) -> None:
        if self._link is not None:
            self._link.close()
        self._settle(outcome)

    def _settle(self, outcome: Any) -> None:
        if self.result.called:
            return
        if isinstance(outcome, Failure):
            self.result.errback(outcome)
        else:
            self.result.callback(outcome)

    def _fall_back(self) -> None:
        """Send the body on a ``cp-upload`` stream instead."""
        try:
            upload = start_upload(self._agent, self._request)
        except AgentError as e:
            self._settle(Failure(e))
            return
        self._fallback = upload
        upload.result.addBoth(self._settle)
        held, self._held, self._held_size = self._held, [], 0
        for chunk in held:
            upload.write(chunk)
        if self._producer is not None:
            upload.register_producer(self._producer)
            self._resume_producer()
        if self._ended:
            upload.end()

    # -- IUpload ----------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        self._sent += len(data)
        assert self._link is not None
        self._link.write(data)

    def write(self, data: bytes) -> None:
        """Body bytes: held until the guest said how it takes them."""
        if self._fallback is not None:
            self._fallback.write(data)
        elif self._bulk:
            self._send(data)
        else:
            self._held.append(data)
            self._held_size += len(data)
            if self._held_size > HELD_HIGH_WATER and self._producer is not None and not self._producer_paused:
                self._producer_paused = True
                self._producer.pauseProducing()

    def _resume_producer(self) -> None:
        if self._producer is not None and self._producer_paused:
            self._producer_paused = False
            self._producer.resumeProducing()

    def register_producer(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take more."""
        self._producer = producer
        if self._fallback is not None:
            self._fallback.register_producer(producer)
        elif self._bulk and self._link is not None:
            self._link.transport.registerProducer(producer, True)  # type: ignore[attr-defined]

    def unregister_producer(self) -> None:
        """Forget the producer."""
        if self._fallback is not None:
            self._fallback.unregister_producer()
        elif self._bulk and self._link is not None and self._producer is not None:
            self._link.transport.unregisterProducer()  # type: ignore[attr-defined]
        self._producer = None

    def end(self) -> None:
        """The body is complete."""
        self._ended = True
        if self._fallback is not None:
            self._fallback.end()
        elif self._bulk:
            self._finish()

    def _finish(self) -> None:
        if self._stream is not None:
            self._stream.write(encode_upload_end(self._sent))
            self._stream.loseConnection()

    def abort(self) -> None:
        """Give up: the guest removes what it was writing."""
        self._aborted = True
        if self._fallback is not None:
            self._fallback.abort()
            return
        if self._link is not None:
            self._link.close()
        if self._stream is not None:
            self._stream.abortConnection(ResetCode.CANCEL, "copy cancelled")


class BulkDownload(GuestDownload):
    """A download whose content may come over the bulk port."""

    def __init__(self, channel: BulkChannel) -> None:
        super().__init__()
        self._channel = channel
        self._link: Optional[BulkLink] = None
        self._bulk_size: Optional[int] = None
        self._bulk_received = 0
        self._stream_ended = False

    async def open(self, agent: Channel, request: DownloadRequest) -> None:
        """Connect the link and open the stream."""
        link = await self._channel.connect()
        if self._aborted:
            if link is not None:
                link.close()
            return
        header = request.to_json()
        if link is not None:
            header["bulk"] = link.token.hex()
            self._link = link
            link.lost.addCallback(lambda _: self._link_lost())
        try:
            stream = agent.open_stream(header, _DownloadProtocol(self))
        except AgentError as e:
            if link is not None:
                link.close()
            self._head_failed(Failure(e))
            return
        self._stream = stream
        stream.loseConnection()
        self._regulate()

    def _headed(self, reply: Any, rest: bytes) -> None:
        result = reply.get("result") if isinstance(reply, dict) else None
        size = result.get("size") if isinstance(result, dict) else None
        link = self._link
        if link is not None and isinstance(result, dict) and result.get("bulk") is True and usable_size(size):
            self._bulk_size = size
        elif link is not None:
            self._link = None
            link.close()
        super()._headed(reply, rest)
        if self._bulk_size is not None and link is not None:
            if not self._head_ok:
                link.close()
                return
            link.start(self._bulk_content)

    def _bulk_content(self, data: bytes) -> None:
        assert self._bulk_size is not None
        left = self._bulk_size - self._bulk_received
        data = data[:left]
        self._bulk_received += len(data)
        if data:
            GuestDownload._content(self, data)
        if self._bulk_received >= self._bulk_size:
            link, self._link = self._link, None
            if link is not None:
                link.close()
            self._complete()

    def _ended(self, reason: Failure, headed: bool) -> None:
        if self._bulk_size is None or reason.check(ConnectionDone) is None:
            if self._link is not None:
                link, self._link = self._link, None
                link.close()
            super()._ended(reason, headed)
            return
        self._stream_ended = True
        self._complete()

    def _complete(self) -> None:
        """Both the stream ended and all content came: done (once there is a writer)."""
        assert self._bulk_size is not None
        if self._stream_ended and self._bulk_received >= self._bulk_size:
            super()._ended(Failure(ConnectionDone()), True)

    def _link_lost(self) -> None:
        if self._bulk_size is None or self._bulk_received >= self._bulk_size or self._aborted:
            return
        if self.done.called or not self._head_ok:
            return
        self._finished = True
        self.done.errback(AgentError(GuestErrorKind.INTERRUPTED,
                                     f"the copy was cut short: the bulk port closed after {self._bulk_received} bytes"))
        if self._stream is not None:
            self._stream.abortConnection(ResetCode.CANCEL, "bulk port closed")

    def _regulate(self) -> None:
        super()._regulate()
        link = self._link
        if link is None:
            return
        if self._consumer_paused or (self._head_ok and self._write is None):
            link.pause()
        else:
            link.resume()

    def abort(self) -> None:
        """Reset the stream and drop the link (the guest stops)."""
        super().abort()
        if self._link is not None:
            link, self._link = self._link, None
            link.close()


__all__ = ["BulkDownload", "BulkUpload", "HELD_HIGH_WATER"]
