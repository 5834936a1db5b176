# -*- test-case-name: tests.agent.test_copying -*-
"""
The host's end of file copies: ``cp-upload`` and ``cp-download`` streams (the
guest side and the stream contents are described in
:mod:`vmservice.guest.copying` and ``docs/agent-protocol.md``).

:func:`start_upload` gives a :class:`GuestUpload`: write the body into it (a
registered push producer is paused while the guest's credit is spent), end it,
await :attr:`GuestUpload.result`.  :func:`start_download` gives a
:class:`GuestDownload`: await its :attr:`~GuestDownload.head`, then
:meth:`~GuestDownload.deliver_to` a writer; as an ``IPushProducer`` it withholds
credit from the guest while its consumer is paused, which stops the guest's
reads.  Failures are :class:`~vmservice.errors.AgentError`\ s; nothing here knows HTTP.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, cast

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ..errors import AgentError, GuestErrorKind
from ..guestport.files import (DownloadHead, DownloadRequest, IDownload, IUpload, UploadRequest, UploadResult,
                                 usable_name, usable_size)
from ..wire.payloads import decode_head
from ..wire import ResetCode
from .channel import Channel
from .errors import AgentRequestFailed, stream_error
from .filesystem import reply_result, reply_value
from .stream import AgentStream

log = Logger()

#: Largest upload reply accepted from the guest.
MAX_UPLOAD_REPLY = 64 * 1024


def _malformed(message: str) -> AgentError:
    return AgentRequestFailed(message, kind=GuestErrorKind.MALFORMED)


@implementer(IHalfCloseableProtocol)
class _UploadProtocol(Protocol):
    """Collects the guest's one JSON reply (which may come before the body ended)."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self.reply: Deferred[UploadResult] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > MAX_UPLOAD_REPLY:
            self._settle(Failure(AgentRequestFailed("the guest's copy reply is too large", kind=GuestErrorKind.TOO_LARGE)))
            cast(AgentStream, self.transport).abortConnection(ResetCode.PROTOCOL_ERROR, "reply too large")
            return
        self._chunks.append(data)

    def _settle(self, outcome: Any) -> None:
        if self.reply.called:
            return
        if isinstance(outcome, Failure):
            self.reply.errback(outcome)
        else:
            self.reply.callback(outcome)

    def readConnectionLost(self) -> None:
        try:
            result = reply_result(b"".join(self._chunks), "copy")
            if not isinstance(result, dict) or not isinstance(result.get("path"), str):
                raise _malformed("the guest's copy reply has no path")
            entries = result.get("entries")
            self._settle(UploadResult(path=result["path"], size=int(result.get("size") or 0),
                                      entries=entries if isinstance(entries, int) else None))
        except AgentError as e:
            self._settle(Failure(e))

    def writeConnectionLost(self) -> None:
        pass

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        if self.reply.called:
            return
        if reason.check(ConnectionDone) and self._chunks:
            self.readConnectionLost()
        else:
            self._settle(Failure(stream_error(reason, "the copy")))


@implementer(IUpload)
class GuestUpload:
    """
    An upload in progress.

    :ivar result: fires with the :class:`UploadResult`, or fails with an
        :class:`~vmservice.errors.AgentError` (the guest's refusal may come
        before the body was all sent).
    """

    def __init__(self, stream: AgentStream, protocol: _UploadProtocol) -> None:
        self._stream = stream
        self.result = protocol.reply

    def write(self, data: bytes) -> None:
        """Send body bytes (buffered until credit allows)."""
        self._stream.write(data)

    def register_producer(self, producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take more."""
        self._stream.registerProducer(producer, True)

    def unregister_producer(self) -> None:
        """Forget the producer."""
        self._stream.unregisterProducer()

    def end(self) -> None:
        """The body is complete (HALF_CLOSE after what is buffered): the guest may commit it."""
        self._stream.loseConnection()

    def abort(self) -> None:
        """Give up: the guest removes what it was writing."""
        self._stream.abortConnection(ResetCode.CANCEL, "copy cancelled")


def start_upload(agent: Channel, request: UploadRequest) -> GuestUpload:
    """
    Open an upload stream.

    :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
    """
    protocol = _UploadProtocol()
    stream = agent.open_stream(request.to_json(), protocol)
    return GuestUpload(stream, protocol)


def download_head(result: Any) -> DownloadHead:
    """
    The :class:`DownloadHead` of the guest's head ``result``, each value made one the response can carry
    (the guest is untrusted, and these go into the response's headers): a type other than ``directory``
    is ``file``; a name that is no file's base name (:func:`usable_name`) is none; the mode is its
    permission bits; a size that is no count of bytes (:func:`usable_size`) is none (the response is then
    chunked, its end the stream's).  Whether the content then has that size is checked as it arrives.

    :raises KeyError: (or ``TypeError``, ``ValueError``) without a type, name or integer mode.
    """
    kind, name, mode, size = result["type"], result["name"], result["mode"], result.get("size")
    if type(mode) is not int:
        raise TypeError("the mode is not an integer")
    return DownloadHead(type="directory" if kind == "directory" else "file",
                        name=name if usable_name(name) else "", mode=mode & 0o7777,
                        size=size if usable_size(size) else None)


@implementer(IHalfCloseableProtocol)
class _DownloadProtocol(Protocol):
    """Parses the head, then passes content on (holding it until there is a writer)."""

    def __init__(self, owner: "GuestDownload") -> None:
        self._owner = owner
        self._buffer = bytearray()
        self._headed = False

    def dataReceived(self, data: bytes) -> None:
        if self._headed:
            self._owner._content(data)
            return
        self._buffer += data
        try:
            decoded = decode_head(bytes(self._buffer))
        except ValueError as e:
            self._owner._head_failed(Failure(_malformed(f"the guest's copy head is malformed: {e}")))
            cast(AgentStream, self.transport).abortConnection(ResetCode.PROTOCOL_ERROR, "bad head")
            return
        if decoded is None:
            return
        reply, used = decoded
        rest = bytes(self._buffer[used:])
        self._buffer.clear()
        self._headed = True
        self._owner._headed(reply, rest)

    def readConnectionLost(self) -> None:
        pass

    def writeConnectionLost(self) -> None:
        pass

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._owner._ended(reason, self._headed)


@implementer(IDownload)
class GuestDownload:
    """
    A download in progress, and the push producer of its content.

    :ivar head: fires with the :class:`DownloadHead`, or fails with an
        :class:`~vmservice.errors.AgentError` (not found, a directory in
        binary mode ...).
    :ivar done: fires once all content was delivered, or fails with an
        :class:`~vmservice.errors.AgentError` of kind ``INTERRUPTED``: also when
        the content is not the size the head gave (the guest's stream is then
        reset, and no byte past that size is delivered).
    """

    def __init__(self) -> None:
        self._stream: Optional[AgentStream] = None
        self._write: Optional[Callable[[bytes], None]] = None
        self._pending: list[bytes] = []
        self._consumer_paused = False
        self._finished = False
        self._head_ok = False
        self._aborted = False
        #: The head's size: the content must be exactly that many bytes.
        self._declared: Optional[int] = None
        #: Bytes of content received so far (delivered or pending).
        self._received = 0
        self.delivered = 0
        self.head: Deferred[DownloadHead] = Deferred()
        self.done: Deferred[None] = Deferred()

    # -- from the protocol --------------------------------------------------------

    def _head_failed(self, reason: Failure) -> None:
        if not self.head.called:
            self.head.errback(reason)

    def _headed(self, reply: Any, rest: bytes) -> None:
        try:
            result = reply_value(reply, "copy")
            head = download_head(result)
        except AgentError as e:
            self._head_failed(Failure(e))
            return
        except (KeyError, TypeError, ValueError):
            self._head_failed(Failure(_malformed("the guest's copy head is incomplete")))
            return
        self._head_ok = True
        self._declared = head.size
        self.head.callback(head)
        if rest:
            # After the head's callback: the content checked against its size may fail the copy, which
            # comes after the head.
            self._content(rest)
        self._regulate()

    def _content(self, data: bytes) -> None:
        if self.done.called:
            return
        declared = self._declared
        if declared is not None and self._received + len(data) > declared:
            # More than the head said: what fits goes on, then the copy fails (the HTTP response, whose
            # Content-Length was the head's size, must not get a byte more).
            data = data[:declared - self._received]
            self._received += len(data)
            if data:
                self._deliver(data)
            self._lied(f"the guest sent more than the {declared} bytes it declared")
            return
        self._received += len(data)
        self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        if self._write is None:
            self._pending.append(data)
            self._regulate()
            return
        self.delivered += len(data)
        self._write(data)

    def _lied(self, message: str) -> None:
        """The content does not match the head: the copy fails, the guest's stream is reset."""
        self._finished = True
        self.done.errback(AgentError(GuestErrorKind.INTERRUPTED, f"the copy was cut short: {message}"))
        if self._stream is not None:
            self._stream.abortConnection(ResetCode.PROTOCOL_ERROR, "content does not match the head")

    def _ended(self, reason: Failure, headed: bool) -> None:
        self._finished = True
        clean = reason.check(ConnectionDone) is not None
        if not self.head.called:
            error = _malformed("the guest ended the copy without a head") if clean else stream_error(reason, "the copy")
            self._head_failed(Failure(error))
            return
        if not self._head_ok or self.done.called:
            return
        if not clean:
            if not self._aborted:
                lost = stream_error(reason, "the copy")
                self.done.errback(AgentError(GuestErrorKind.INTERRUPTED, f"the copy was cut short: {lost}"))
        elif self._declared is not None and self._received < self._declared:
            self._lied(f"the guest ended the copy after {self._received} of the {self._declared} bytes it declared")
        elif self._write is not None:
            self.done.callback(None)

    # -- for the caller -------------------------------------------------------------

    def deliver_to(self, write: Callable[[bytes], None]) -> None:
        """Send the content to ``write`` from now on (what arrived already first)."""
        self._write = write
        pending, self._pending = self._pending, []
        for chunk in pending:
            self.delivered += len(chunk)
            write(chunk)
        self._regulate()
        if self._finished and self._head_ok and not self.done.called:
            self.done.callback(None)

    def _regulate(self) -> None:
        stream = self._stream
        if stream is None or self._finished:
            return
        if self._consumer_paused or (self._head_ok and self._write is None):
            stream.pauseProducing()
        else:
            stream.resumeProducing()

    def pauseProducing(self) -> None:
        """The consumer is full: withhold credit (the guest stops reading)."""
        self._consumer_paused = True
        self._regulate()

    def resumeProducing(self) -> None:
        """The consumer has room again."""
        self._consumer_paused = False
        self._regulate()

    def stopProducing(self) -> None:
        """The consumer went away: abort."""
        self.abort()

    def abort(self) -> None:
        """Reset the stream (the guest stops); :attr:`done` is left unfired."""
        self._aborted = True
        if self._stream is not None and not self._finished:
            self._stream.abortConnection(ResetCode.CANCEL, "copy cancelled")


def start_download(agent: Channel, request: DownloadRequest) -> GuestDownload:
    """
    Open a download stream (and half-close it: the host sends nothing).

    :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
    """
    download = GuestDownload()
    stream = agent.open_stream(request.to_json(), _DownloadProtocol(download))
    download._stream = stream
    stream.loseConnection()
    download._regulate()
    return download


__all__ = [
    "GuestDownload",
    "GuestUpload",
    "MAX_UPLOAD_REPLY",
    "download_head",
    "start_download",
    "start_upload",
]
