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
reads.  Guest error kinds become service errors here; nothing here knows HTTP.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ..errors import AgentNotConnected, BadRequest, Internal, NotSupported, ServiceError
from ..wire.payloads import decode_head
from ..wire import ResetCode
from .execution import AgentWithStreams
from .filesystem import parse_reply
from .stream import AgentStream, StreamReset

log = Logger()

#: Largest upload reply accepted from the guest.
MAX_UPLOAD_REPLY = 64 * 1024

#: Guest error kinds of copies (beyond the fs ones) and their service errors.
_COPY_ERRORS: dict[str, Callable[[str], ServiceError]] = {
    "is_a_directory": lambda m: BadRequest(m, code="is_a_directory"),
    "unsafe_entry": lambda m: BadRequest(m, code="unsafe_entry"),
    "unsupported_entry": lambda m: BadRequest(m, code="unsupported_entry"),
    "bad_archive": lambda m: BadRequest(m, code="bad_archive"),
}


class CopyInterrupted(Exception):
    """
    A download ended after its head without its whole content (the guest reset
    the stream, or the agent went away): the caller must not present what
    arrived as complete.
    """


@frozen
class UploadRequest:
    """
    One upload; becomes the stream's OPEN header.

    :ivar path: the guest path (absolute or ``~``/``~/...``).
    :ivar mode: ``binary`` (the body is the file) or ``tar``.
    :ivar uid: owner, ``None`` for the default (see the guest module).
    :ivar gid: group, ``None`` for the default.
    :ivar permissions: the file's mode (binary) or ``path``'s (tar), or ``None``.
    """

    path: str
    mode: str = "binary"
    uid: Optional[int] = None
    gid: Optional[int] = None
    permissions: Optional[int] = None

    def header(self) -> dict[str, Any]:
        """The OPEN header (documented in ``docs/agent-protocol.md``)."""
        return {"op": "cp-upload", "path": self.path, "mode": self.mode, "uid": self.uid, "gid": self.gid,
                "permissions": self.permissions}


@frozen
class UploadResult:
    """
    What the guest wrote.

    :ivar path: the file or directory written (``~`` expanded).
    :ivar size: body bytes received.
    :ivar entries: tar entries extracted (``None`` for binary).
    """

    path: str
    size: int
    entries: Optional[int] = None


@frozen
class DownloadRequest:
    """
    One download; becomes the OPEN header.

    :ivar path: the guest path.
    :ivar mode: ``binary`` (a file's bytes) or ``tar``.
    """

    path: str
    mode: str = "binary"

    def header(self) -> dict[str, Any]:
        """The OPEN header."""
        return {"op": "cp-download", "path": self.path, "mode": self.mode}


@frozen
class DownloadHead:
    """
    What the guest says before the content.

    :ivar type: ``file`` or ``directory`` (the source, not the stream's format).
    :ivar name: the source's base name.
    :ivar mode: the source's permission bits.
    :ivar size: bytes that follow for a non-empty binary file, else ``None``.
    """

    type: str
    name: str
    mode: int
    size: Optional[int]


def _result(reply: Any) -> Any:
    """The ``result`` of a guest reply, or the mapped service error."""
    if isinstance(reply, dict) and reply.get("ok") is False and reply.get("error") in _COPY_ERRORS:
        message = reply.get("message")
        raise _COPY_ERRORS[reply["error"]](message if isinstance(message, str) else "copy failed")
    return parse_reply(json.dumps(reply).encode())


def _lost(reason: Failure) -> ServiceError:
    """The service error for a stream that ended without a reply."""
    error = reason.value
    if isinstance(error, StreamReset):
        if error.code == ResetCode.UNKNOWN_OP:
            return NotSupported("the guest agent cannot copy files (image too old)", code="not_supported")
        if error.code == ResetCode.PEER_RESTARTED:
            return AgentNotConnected("the agent restarted during the copy", code="agent_unavailable")
        return Internal(f"the guest failed the copy: {error}", code="agent_error")
    if isinstance(error, (ConnectionLost, ConnectionDone)):
        return AgentNotConnected(f"the agent lost the copy: {reason.getErrorMessage()}", code="agent_unavailable")
    if isinstance(error, ServiceError):
        return error
    return Internal(f"the copy failed: {reason.getErrorMessage()}", code="agent_error")


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
            self._settle(Failure(Internal("the guest's copy reply is too large", code="agent_error")))
            self.transport.abortConnection(ResetCode.PROTOCOL_ERROR, "reply too large")
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
            reply = json.loads(b"".join(self._chunks))
        except ValueError:
            self._settle(Failure(Internal("the guest's copy reply is not JSON", code="agent_error")))
            return
        try:
            result = _result(reply)
            if not isinstance(result, dict) or not isinstance(result.get("path"), str):
                raise Internal("the guest's copy reply has no path", code="agent_error")
            entries = result.get("entries")
            self._settle(UploadResult(path=result["path"], size=int(result.get("size") or 0),
                                      entries=entries if isinstance(entries, int) else None))
        except ServiceError as e:
            self._settle(Failure(e))

    def writeConnectionLost(self) -> None:
        pass

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        if self.reply.called:
            return
        if reason.check(ConnectionDone) and self._chunks:
            self.readConnectionLost()
        else:
            self._settle(Failure(_lost(reason)))


class GuestUpload:
    """
    An upload in progress.

    :ivar result: fires with the :class:`UploadResult`, or fails with a
        :class:`~vmservice.errors.ServiceError` (the guest's refusal may come
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


def start_upload(agent: AgentWithStreams, request: UploadRequest) -> GuestUpload:
    """
    Open an upload stream.

    :raises vmservice.agent.client.AgentUnavailable: the agent is not connected.
    """
    protocol = _UploadProtocol()
    stream = agent.open_stream(request.header(), protocol)
    return GuestUpload(stream, protocol)


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
            self._owner._head_failed(Failure(Internal(f"the guest's copy head is malformed: {e}", code="agent_error")))
            self.transport.abortConnection(ResetCode.PROTOCOL_ERROR, "bad head")
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


@implementer(IPushProducer)
class GuestDownload:
    """
    A download in progress, and the push producer of its content.

    :ivar head: fires with the :class:`DownloadHead`, or fails with a
        :class:`~vmservice.errors.ServiceError` (not found, a directory in
        binary mode ...).
    :ivar done: fires once all content was delivered, or fails with
        :class:`CopyInterrupted`.
    """

    def __init__(self) -> None:
        self._stream: Optional[AgentStream] = None
        self._write: Optional[Callable[[bytes], None]] = None
        self._pending: list[bytes] = []
        self._consumer_paused = False
        self._finished = False
        self._head_ok = False
        self._aborted = False
        self.delivered = 0
        self.head: Deferred[DownloadHead] = Deferred()
        self.done: Deferred[None] = Deferred()

    # -- from the protocol --------------------------------------------------------

    def _head_failed(self, reason: Failure) -> None:
        if not self.head.called:
            self.head.errback(reason)

    def _headed(self, reply: Any, rest: bytes) -> None:
        try:
            result = _result(reply)
            head = DownloadHead(type=str(result["type"]), name=str(result["name"]), mode=int(result["mode"]),
                                size=result.get("size") if isinstance(result.get("size"), int) else None)
        except ServiceError as e:
            self._head_failed(Failure(e))
            return
        except (KeyError, TypeError, ValueError):
            self._head_failed(Failure(Internal("the guest's copy head is incomplete", code="agent_error")))
            return
        self._head_ok = True
        if rest:
            self._pending.append(rest)
        self._regulate()
        self.head.callback(head)

    def _content(self, data: bytes) -> None:
        if self._write is None:
            self._pending.append(data)
            self._regulate()
            return
        self.delivered += len(data)
        self._write(data)

    def _ended(self, reason: Failure, headed: bool) -> None:
        self._finished = True
        clean = reason.check(ConnectionDone) is not None
        if not self.head.called:
            error = _lost(reason) if not clean else Internal("the guest ended the copy without a head", code="agent_error")
            self._head_failed(Failure(error))
            return
        if not self._head_ok or self.done.called:
            return
        if not clean:
            if not self._aborted:
                self.done.errback(CopyInterrupted(_lost(reason).message))
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


def start_download(agent: AgentWithStreams, request: DownloadRequest) -> GuestDownload:
    """
    Open a download stream (and half-close it: the host sends nothing).

    :raises vmservice.agent.client.AgentUnavailable: the agent is not connected.
    """
    download = GuestDownload()
    stream = agent.open_stream(request.header(), _DownloadProtocol(download))
    download._stream = stream
    stream.loseConnection()
    download._regulate()
    return download


__all__ = [
    "CopyInterrupted",
    "DownloadHead",
    "DownloadRequest",
    "GuestDownload",
    "GuestUpload",
    "MAX_UPLOAD_REPLY",
    "UploadRequest",
    "UploadResult",
    "start_download",
    "start_upload",
]
