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
from ..wire import ResetCode
from .channel import Channel
from .download_state import DOWNLOAD_MACHINE, DownloadCore
from .errors import AgentRequestFailed, stream_error
from .filesystem import reply_result, reply_value
from .headed import HeadedProtocol
from .relay import CreditRelay
from .stream import AgentStream

log = Logger()

#: Largest upload reply accepted from the guest.
MAX_UPLOAD_REPLY = 64 * 1024


def settle(result: Deferred[Any], outcome: Any) -> None:
    """Fire ``result`` with ``outcome`` (a failure fails it), unless it fired."""
    if result.called:
        return
    if isinstance(outcome, Failure):
        result.errback(outcome)
    else:
        result.callback(outcome)


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
        settle(self.reply, outcome)

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


@implementer(IDownload)
class GuestDownload(CreditRelay):
    """
    A download in progress, and the push producer of its content; its
    lifecycle is the machine of :mod:`.download_state`.

    :ivar head: fires with the :class:`DownloadHead`, or fails with an
        :class:`~vmservice.errors.AgentError` (not found, a directory in
        binary mode ...).
    :ivar done: fires once all content was delivered, or fails with an
        :class:`~vmservice.errors.AgentError` of kind ``INTERRUPTED``: also when
        the content is not the size the head gave (the guest's stream is then
        reset, and no byte past that size is delivered).
    """

    def __init__(self) -> None:
        super().__init__()
        self._core = DownloadCore(relay=self)
        self._inputs = DOWNLOAD_MACHINE(self._core)
        #: The head's size: the content must be exactly that many bytes.
        self._declared: Optional[int] = None
        #: Bytes of content received so far (delivered or pending).
        self._received = 0
        self.head = self._core.head
        self.done = self._core.done

    @property
    def delivered(self) -> int:
        """Bytes given to the writer so far."""
        return self._core.delivered

    # -- from the protocol (a HeadReceiver) -----------------------------------------

    def _head_failed(self, reason: Failure) -> None:
        self._inputs.refused(reason)

    def connected(self, stream: AgentStream) -> None:
        self._stream = self._core.stream = stream

    def head_malformed(self, error: ValueError) -> None:
        self._head_failed(Failure(_malformed(f"the guest's copy head is malformed: {error}")))
        assert self._stream is not None
        self._stream.abortConnection(ResetCode.PROTOCOL_ERROR, "bad head")

    def read_ended(self) -> None:
        pass

    def headed(self, reply: Any, rest: bytes) -> None:
        head = self._head_of(reply)
        if head is not None:
            self._take(head, rest)

    def _head_of(self, reply: Any) -> Optional[DownloadHead]:
        """The head the guest's ``reply`` describes, or ``None`` (the head failed)."""
        try:
            return download_head(reply_value(reply, "copy"))
        except AgentError as e:
            self._head_failed(Failure(e))
        except (KeyError, TypeError, ValueError):
            self._head_failed(Failure(_malformed("the guest's copy head is incomplete")))
        return None

    def _take(self, head: DownloadHead, rest: bytes) -> None:
        """The head is good: content may come, ``rest`` first."""
        self._declared = head.size
        self._inputs.head_ok(head)
        if rest:
            # After the head's callback: the content checked against its size may fail the copy, which
            # comes after the head.
            self.body(rest)
        self._regulate()

    def body(self, data: bytes) -> None:
        if self.done.called:
            return
        declared = self._declared
        if declared is not None and self._received + len(data) > declared:
            # More than the head said: what fits goes on, then the copy fails (the HTTP response, whose
            # Content-Length was the head's size, must not get a byte more).
            data = data[:declared - self._received]
            self._received += len(data)
            if data:
                self._inputs.content(data)
            self._lied(f"the guest sent more than the {declared} bytes it declared")
            return
        self._received += len(data)
        self._inputs.content(data)

    def _lied(self, message: str) -> None:
        """The content does not match the head: the copy fails, the guest's stream is reset."""
        self._inputs.cut(message, ResetCode.PROTOCOL_ERROR, "content does not match the head")

    def ended(self, reason: Failure) -> None:
        if reason.check(ConnectionDone) is None:
            self._inputs.lost(reason)
        elif self._declared is not None and self._received < self._declared:
            self._lied(f"the guest ended the copy after {self._received} of the {self._declared} bytes it declared")
        else:
            self._inputs.finished()

    # -- for the caller -------------------------------------------------------------

    def deliver_to(self, write: Callable[[bytes], None]) -> None:
        """Send the content to ``write`` from now on (what arrived already first)."""
        self._inputs.writer(write)

    def _regulate(self) -> None:
        self._inputs.credit()

    def abort(self) -> None:
        """Reset the stream (the guest stops); :attr:`done` is left unfired."""
        self._inputs.abort()


def start_download(agent: Channel, request: DownloadRequest) -> GuestDownload:
    """
    Open a download stream (and half-close it: the host sends nothing).

    :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
    """
    download = GuestDownload()
    stream = agent.open_stream(request.to_json(), HeadedProtocol(download))
    stream.loseConnection()
    download._regulate()
    return download


__all__ = [
    "GuestDownload",
    "GuestUpload",
    "MAX_UPLOAD_REPLY",
    "download_head",
    "settle",
    "start_download",
    "start_upload",
]
