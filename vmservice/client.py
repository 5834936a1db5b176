# -*- test-case-name: tests.test_client,tests.test_duplex,tests.integration.test_client -*-
"""
The Python client of the vmservice HTTP API, built on treq.

It speaks to a daemon over TCP (``http://host:port``) or over a UNIX socket
(any address that starts with ``/``, ``./``, ``../``, ``~/`` or ``unix://``, or
ends in ``.sock``: the rule every Slicer client follows, so one address works
with all of them).  Every call is a coroutine that answers the decoded JSON
body (or the text of a ``text/plain`` answer: pause, resume, suspend,
restore, shutdown); a non-2xx answer raises :class:`ApiError` carrying the
daemon's ErrorResponse, and a daemon that cannot be reached raises
:class:`ConnectFailed` naming the address, so callers never see raw Twisted
connection errors.

All requests go through :meth:`Client._send` (and :meth:`Client._request`,
which reads the whole answer), so each operation is one small method.
Operations whose data can be large stream it both ways instead of holding it:

- :meth:`Client.exec` hands each NDJSON record to a callback as it arrives
  (read with :func:`treq.collect`); with ``stdin`` the request body streams
  from an ``IBodyProducer`` or a file while the output comes back (full
  duplex, see :mod:`vmservice._duplex`);
- :meth:`Client.upload` streams a file, a pipe (chunked) or a producer;
  :meth:`Client.download` hands each chunk to a ``write`` callback;
- :meth:`Client.shell` opens an interactive shell over a WebSocket
  (:mod:`vmservice.shell_session`);
- :meth:`Client.watch` is an asynchronous iterator of file-system events
  (Server-Sent Events, decoded by :class:`SseDecoder`); a consumer that
  falls behind pauses the connection, and leaving the loop closes it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from collections import deque
from contextlib import aclosing
from typing import IO, TYPE_CHECKING, Any, AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping, Sequence, TypeVar, cast
from urllib.parse import quote

import treq
from attrs import frozen
from treq.client import HTTPClient
from twisted.internet import abstract, fdesc
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.internet.error import ConnectError, ConnectionDone, DNSLookupError
from twisted.internet.protocol import Protocol
from twisted.internet.interfaces import (
    IConsumer,
    IPushProducer,
    IReactorFDSet,
    IReactorPluggableNameResolver,
    IReactorTCP,
    IReactorTime,
    IReactorUNIX,
)
from twisted.internet.protocol import Protocol
from twisted.internet.task import Cooperator
from twisted.python.failure import Failure
from twisted.web.client import (
    URI,
    Agent,
    FileBodyProducer,
    HTTPConnectionPool,
    RequestTransmissionFailed,
    ResponseDone,
    ResponseFailed,
)
from twisted.web.http import RESPONSES, PotentialDataLoss
from twisted.web.iweb import UNKNOWN_LENGTH, IAgentEndpointFactory, IBodyProducer, IResponse
from zope.interface import implementer

from . import __version__
from ._duplex import DuplexBody, DuplexPool
from .shell_session import ShellError, ShellSession, open_shell, shell_path

if TYPE_CHECKING:
    from .tunneling import TunnelEndpoint

__all__ = [
    "ApiError",
    "Client",
    "CP_V1_MODES",
    "ConnectFailed",
    "DEFAULT_URL",
    "Download",
    "ExecInterrupted",
    "ExecRecord",
    "FdReader",
    "ExecResult",
    "FdBodyProducer",
    "IBodyReactor",
    "IClientReactor",
    "NdjsonDecoder",
    "ShellError",
    "ShellSession",
    "SseDecoder",
    "WatchInterrupted",
    "body_producer",
    "decode_exec_record",
    "is_unix_socket",
    "socket_path",
]

#: Where a daemon listens when nothing else is configured.
DEFAULT_URL = "http://127.0.0.1:8080"

#: The base URL requests carry over a UNIX socket; the daemon ignores the host.
_SOCKET_BASE = "http://localhost"

_USER_AGENT = f"vmservice-client/{__version__}".encode("ascii")

_Params = Mapping[str, "str | int | bool | Sequence[str] | None"]

_T = TypeVar("_T")


class IBodyReactor(IReactorTime, IReactorFDSet):
    """
    What :func:`body_producer` needs of its reactor: ``IReactorTime`` to read a
    file in chunks, ``IReactorFDSet`` to read a pipe as data arrives.

    Every reactor Twisted installs provides both; this interface only names
    the pair for the type checker (no reactor declares it).
    """


class IClientReactor(IBodyReactor, IReactorTCP, IReactorUNIX, IReactorPluggableNameResolver):
    """
    What a :class:`Client` needs of its reactor: connections over TCP (with
    host names resolved) or a UNIX socket, timers, and request bodies read
    from files and pipes (see :class:`IBodyReactor`).

    Every reactor Twisted installs provides all of these; this interface only
    names them together for the type checker (no reactor declares it).
    """


class ApiError(Exception):
    """
    The daemon answered with a status other than 2xx.

    :ivar status: the HTTP status code.
    :ivar code: the ErrorResponse's stable snake_case ``code``, or ``None``
        when the body had none (or was not an ErrorResponse at all).
    :ivar message: the ErrorResponse's ``error``; for a body that is not
        JSON, its text; for an empty body, the status phrase.
    """

    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message

    @classmethod
    def from_body(cls, status: int, body: bytes) -> "ApiError":
        """
        Build the error from a response body: an ErrorResponse when it is
        one, otherwise whatever text the body holds.
        """
        text = body.decode("utf-8", "replace").strip()
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
            code = decoded.get("code")
            return cls(status, code if isinstance(code, str) and code else None, decoded["error"])
        if not text:
            text = RESPONSES.get(status, b"").decode("ascii") or f"HTTP {status}"
        return cls(status, None, text)


class ConnectFailed(Exception):
    """
    The daemon could not be reached at all (refused, no such socket, no
    such host).

    :ivar url: the address the client was made with.
    :ivar reason: what the operating system said.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(url, reason)
        self.url = url
        self.reason = reason

    def __str__(self) -> str:
        return f"cannot connect to {self.url}: {self.reason}"


class ExecInterrupted(Exception):
    """
    An exec stream ended without its last record (``exit`` or ``error``):
    the connection to the daemon was lost, or the daemon sent something that
    is not an exec record.  What the command did is unknown.
    """


@frozen
class ExecRecord:
    """
    One record of an exec stream, decoded: payloads are bytes whatever the
    ``stdio`` mode, so callers never look at ``encoding``.

    :ivar type: ``started``, ``stdout``, ``stderr``, ``exit`` or ``error``
        (other types a newer daemon adds are passed on unchanged).
    :ivar pid: the process id in the guest, when known.
    :ivar data: the output of a ``stdout``/``stderr`` record; ``b""`` otherwise.
    :ivar exit_code: of ``exit`` and ``error`` records (128+N for signal N).
    :ivar signal: the signal's name (``"SIGTERM"``) when one ended the process.
    :ivar error: the message of an ``error`` record.
    :ivar started_at: RFC 3339, on ``started`` records.
    :ivar ended_at: RFC 3339, on ``exit`` records.
    :ivar timestamp: when the daemon wrote the record.
    :ivar id: the frame's place in a background exec's log (from 1); ``None`` elsewhere.
    :ivar message: what a ``gap`` record of a background exec's log says was dropped.
    :ivar dropped_bytes: the output bytes a ``gap`` record says were dropped.
    """

    type: str
    pid: int | None = None
    data: bytes = b""
    exit_code: int | None = None
    signal: str | None = None
    error: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    timestamp: str | None = None
    id: int | None = None
    message: str | None = None
    dropped_bytes: int | None = None

    @property
    def final(self) -> bool:
        """Whether this record ends the stream (``exit`` or ``error``)."""
        return self.type in ("exit", "error")


@frozen
class ExecResult:
    """
    A finished command (``buffered=true``), its output as bytes.

    :ivar exit_code: the command's exit status; 128+N for signal N.
    :ivar signal: the signal's name when one ended the process.
    :ivar error: set when the command could not be started.
    """

    stdout: bytes
    stderr: bytes
    exit_code: int
    pid: int | None = None
    signal: str | None = None
    error: str | None = None
    started_at: str | None = None
    ended_at: str | None = None


@frozen
class Download:
    """
    What a download's headers said, answered once its body has been written.

    :ivar mode: the file's permission bits from ``X-Service-File-Mode``
        (binary mode), or ``None`` when the daemon sent none.
    :ivar length: the body's length when the daemon announced it.
    :ivar content_type: the body's type (``application/octet-stream`` or
        ``application/x-tar``).
    :ivar source_type: ``file`` or ``directory`` (``X-Slicer-Source-Type``),
        ``None`` when the daemon sent none.
    :ivar source_name: the source's base name (``X-Slicer-Source-Name-Base64``,
        decoded), ``None`` when the daemon sent none (for ``/``).
    """

    mode: int | None
    length: int | None
    content_type: str | None
    source_type: str | None = None
    source_name: str | None = None

    @property
    def tar(self) -> bool:
        """Whether the body is a tar stream (else a file's bytes)."""
        return self.content_type == "application/x-tar"


def _download_info(response: IResponse) -> Download:
    """The :class:`Download` a response's headers describe."""

    def header(name: bytes) -> str | None:
        raw = response.headers.getRawHeaders(name, [None])[0]
        return raw.decode("latin-1") if isinstance(raw, bytes) else raw

    file_mode, encoded = header(b"x-service-file-mode"), header(b"x-slicer-source-name-base64")
    try:
        parsed = int(file_mode, 8) if file_mode else None
    except ValueError:
        parsed = None
    name = None
    if encoded:
        try:
            name = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8", "surrogateescape")
        except (binascii.Error, ValueError):
            name = None
    length = response.length if isinstance(response.length, int) else None
    return Download(parsed, length, header(b"content-type"), header(b"x-slicer-source-type"), name)


#: The copy modes that place a copy like ``cp`` (see ``docs/api.md``).
CP_V1_MODES = ("cp-v1-binary", "cp-v1-tar", "cp-v1-recursive")


class _Abandon(Protocol):
    """Takes a response body nobody wants: drops the connection at once, fires ``done`` when it is gone."""

    def __init__(self) -> None:
        self.done: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        IPushProducer(self.transport).stopProducing()

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.done.callback(None)


def _payload(value: object, encoding: object) -> bytes:
    """The bytes of a record's payload: base64 decoded, or text as UTF-8; ``b""`` when there is none."""
    if not isinstance(value, str):
        return b""
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ExecInterrupted(f"a record's base64 data does not decode: {value[:40]!r}") from None
    return value.encode("utf-8", "surrogatepass")


def _optional(value: object, kind: type[_T]) -> _T | None:
    """``value`` when it is a ``kind`` (a bool is no int here), else ``None``."""
    return value if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) else None


def decode_exec_record(obj: Any) -> ExecRecord:
    """
    An :class:`ExecRecord` from one decoded NDJSON line.  Base64 payloads
    (``"encoding": "base64"``) are decoded; text payloads become UTF-8.  A
    legacy untyped frame (``stdout``/``stderr`` fields, or only
    ``exit_code``) is read as the typed record it stands for.

    :raise ExecInterrupted: ``obj`` is not a record (not an object, or a
        payload that does not decode).
    """
    if not isinstance(obj, dict):
        raise ExecInterrupted(f"not an exec record: {obj!r:.80}")
    kind = obj.get("type")
    encoding = obj.get("encoding")
    if isinstance(kind, str) and kind:
        data = _payload(obj.get("data"), encoding)
    elif isinstance(obj.get("error"), str) and obj["error"]:
        kind, data = "error", b""
    elif "stdout" in obj or "stderr" in obj:
        kind = "stdout" if "stdout" in obj else "stderr"
        data = _payload(obj.get(kind), encoding)
    elif "exit_code" in obj:
        kind, data = "exit", b""
    else:
        raise ExecInterrupted(f"not an exec record: {obj!r:.80}")
    return ExecRecord(
        type=kind,
        pid=_optional(obj.get("pid"), int),
        data=data,
        exit_code=_optional(obj.get("exit_code"), int),
        signal=_optional(obj.get("signal"), str) or None,
        error=_optional(obj.get("error"), str) or None,
        started_at=_optional(obj.get("started_at"), str),
        ended_at=_optional(obj.get("ended_at"), str),
        timestamp=_optional(obj.get("timestamp"), str),
        id=_optional(obj.get("id"), int),
        message=_optional(obj.get("message"), str),
        dropped_bytes=_optional(obj.get("dropped_bytes"), int),
    )


class NdjsonDecoder:
    """
    Splits a byte stream into JSON values, one per ``\n``-terminated line,
    whatever the chunking.  Blank lines are skipped; a line longer than
    ``max_line`` bytes is an error rather than unbounded memory.

    :param max_line: the longest line accepted, in bytes.
    """

    def __init__(self, max_line: int = 64 * 1024 * 1024) -> None:
        self._max_line = max_line
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        """
        The values completed by ``data``.

        :raise ValueError: a line is not JSON or too long.
        """
        self._pending += data
        values = []
        start = 0
        while True:
            end = self._pending.find(b"\n", start)
            if end < 0:
                break
            line = bytes(self._pending[start:end]).strip()
            start = end + 1
            if line:
                values.append(json.loads(line.decode("utf-8")))
        del self._pending[:start]
        if len(self._pending) > self._max_line:
            raise ValueError(f"a line longer than {self._max_line} bytes")
        return values

    def finish(self) -> list[Any]:
        """The value of a last line without its ``\n``, if any; call at the end."""
        line, self._pending = bytes(self._pending).strip(), bytearray()
        return [json.loads(line.decode("utf-8"))] if line else []


class WatchInterrupted(Exception):
    """
    A watch stream ended without the daemon closing it: the connection was
    lost, or the daemon sent something that is not an event.
    """


class SseDecoder:
    """
    Splits a Server-Sent Events stream into its events' data, whatever the
    chunking: ``data:`` lines (joined with ``\n``) up to a blank line make one
    event, whose data must be a JSON object; the last ``id:`` line fills in
    an ``"id"`` the JSON lacks.  Comment lines (``:``, heartbeats) and other
    fields (``event:``, ``retry:``) are skipped; lines end with LF or CRLF.
    A line longer than ``max_line`` bytes is an error rather than unbounded
    memory.

    :param max_line: the longest line accepted, in bytes.
    """

    def __init__(self, max_line: int = 1024 * 1024) -> None:
        self._max_line = max_line
        self._pending = bytearray()
        self._data: list[str] = []
        self._id: int | None = None

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """
        The events completed by ``data``.

        :raise ValueError: an event's data is not a JSON object, or a line is too long.
        """
        self._pending += data
        events = []
        start = 0
        while True:
            end = self._pending.find(b"\n", start)
            if end < 0:
                break
            line = bytes(self._pending[start:end]).removesuffix(b"\r").decode("utf-8")
            start = end + 1
            event = self._line(line)
            if event is not None:
                events.append(event)
        del self._pending[:start]
        if len(self._pending) > self._max_line:
            raise ValueError(f"a line longer than {self._max_line} bytes")
        return events

    def _line(self, line: str) -> dict[str, Any] | None:
        if not line:
            if not self._data:
                return None
            text, self._data = "\n".join(self._data), []
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError(f"an event's data is not a JSON object: {text[:80]!r}")
            if "id" not in value and self._id is not None:
                value["id"] = self._id
            return value
        if line.startswith(":"):
            return None
        name, _, field = line.partition(":")
        field = field[1:] if field.startswith(" ") else field
        if name == "data":
            self._data.append(field)
        elif name == "id" and field.isascii() and field.isdigit():
            self._id = int(field)
        return None


class _EventBody(Protocol):
    """
    Receives a watch response's body: decodes its events into a queue that
    :meth:`next_event` empties, pausing the connection while more than
    ``high`` events wait and resuming it below ``low``.
    """

    def __init__(self, high: int = 256, low: int = 64) -> None:
        self._decoder = SseDecoder()
        self._queue: deque[dict[str, Any]] = deque()
        self._high, self._low = high, low
        self._paused = False
        self._ended: Failure | None = None
        self._error: Exception | None = None
        self._waiter: Deferred[None] | None = None

    def dataReceived(self, data: bytes) -> None:
        if self._error is not None:
            return
        try:
            self._queue.extend(self._decoder.feed(data))
        except ValueError as error:
            self._error = WatchInterrupted(f"the daemon sent something that is not an event: {error}")
            self.stop()
        if len(self._queue) > self._high and not self._paused and self._producer is not None:
            self._paused = True
            self._producer.pauseProducing()
        self._wake()

    @property
    def _producer(self) -> IPushProducer | None:
        # A response body's transport is its connection as a push producer
        # (twisted.web._newclient's TransportProxyProducer).
        return cast(IPushProducer, self.transport) if self.transport is not None else None

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self._ended = reason
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.callback(None)

    async def next_event(self) -> dict[str, Any] | None:
        """
        The next event, or ``None`` once the daemon closed the stream.

        :raise WatchInterrupted: the connection was lost, or the stream does not parse.
        """
        while not self._queue:
            if self._error is not None:
                raise self._error
            if self._ended is not None:
                if self._ended.check(ResponseDone, PotentialDataLoss):
                    return None
                raise WatchInterrupted(f"the connection to the daemon was lost: {self._ended.getErrorMessage()}")
            self._waiter = Deferred()
            try:
                await self._waiter
            finally:
                self._waiter = None
        event = self._queue.popleft()
        if self._paused and len(self._queue) < self._low and self._ended is None and self._producer is not None:
            self._paused = False
            self._producer.resumeProducing()
        return event

    def stop(self) -> None:
        """Close the connection, if the stream is still open (the daemon removes the watch)."""
        if self._ended is None and self._producer is not None:
            self._producer.stopProducing()


class FdReader(abstract.FileDescriptor):
    """Reads a non-blocking file descriptor when the reactor says it is readable."""

    def __init__(
        self, reactor: IReactorFDSet, fd: int, received: Callable[[bytes], None], ended: Callable[[Failure], None]
    ) -> None:
        super().__init__(reactor)
        self._fd = fd
        self._received = received
        self._ended = ended

    def fileno(self) -> int:
        return self._fd

    def doRead(self) -> Exception | None:
        """Read what is there; the connection's end (an exception) when the descriptor is done."""
        ended: Exception | None = fdesc.readFromFD(self._fd, self._received)
        return ended

    def connectionLost(self, reason: Failure) -> None:
        abstract.FileDescriptor.connectionLost(self, reason)
        self._ended(reason)


@implementer(IBodyProducer)
class FdBodyProducer:
    """
    A request body read from a pipe, socket or terminal (``vmctl exec
    --stdin`` reading its stdin, a tar stream written by a thread) as data
    becomes available, without blocking the reactor and without reading
    ahead: when the connection pauses, the descriptor is not read, so the
    writer on the other side blocks.  Its length is unknown, so the body is
    sent chunked.

    The descriptor is made non-blocking while the body is sent and its flags
    are restored afterwards (a terminal is shared with the shell); it is
    never closed here.

    :param reactor: an ``IReactorFDSet`` provider.
    :param fd: the descriptor to read; it must be pollable (not a regular
        file: use :func:`body_producer`, which picks).
    """

    length = UNKNOWN_LENGTH

    def __init__(self, reactor: IReactorFDSet, fd: int) -> None:
        self._reactor = reactor
        self._fd = fd
        self._flags: int | None = None
        self._consumer: IConsumer | None = None
        self._done: Deferred[None] = Deferred()
        self._reader: abstract.FileDescriptor = FdReader(reactor, fd, self._received, self._ended)
        self._stopped = False

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        import fcntl

        self._consumer = consumer
        self._flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fdesc.setNonBlocking(self._fd)
        self._reader.startReading()
        return self._done

    def _received(self, data: bytes) -> None:
        if self._consumer is not None and not self._stopped:
            self._consumer.write(data)

    def _restore(self) -> None:
        import fcntl

        if self._flags is not None:
            try:
                fcntl.fcntl(self._fd, fcntl.F_SETFL, self._flags)
            except OSError:
                pass
            self._flags = None

    def _ended(self, reason: Failure) -> None:
        self._restore()
        if self._stopped or self._done.called:
            return
        if reason.check(ConnectionDone):
            self._done.callback(None)
        else:
            self._done.errback(reason)

    def pauseProducing(self) -> None:
        if not self._reader.disconnected:
            self._reader.stopReading()

    def resumeProducing(self) -> None:
        if not self._reader.disconnected and not self._stopped:
            self._reader.startReading()

    def abort(self, reason: Failure) -> None:
        """
        Fail the body with ``reason`` (the writer on the other side of a pipe
        failed): the request is abandoned rather than sent short.
        """
        self._reader.stopReading()
        self._restore()
        if not self._stopped and not self._done.called:
            self._stopped = True
            self._done.errback(reason)

    def stopProducing(self) -> None:
        """Stop reading for good; the Deferred of :meth:`startProducing` never fires then."""
        self._stopped = True
        self._reader.stopReading()
        self._restore()


def body_producer(reactor: IBodyReactor, source: IO[bytes]) -> IBodyProducer:
    """
    A streaming request body read from ``source``: a regular file (or an
    in-memory one) is read in chunks with its length known; a pipe, socket
    or terminal by :class:`FdBodyProducer` (chunked, as data arrives).

    :param reactor: an ``IReactorTime`` and ``IReactorFDSet`` provider.
    :param source: the file, pipe, socket or terminal to read.
    """
    try:
        fd = source.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):
        fd, mode = -1, stat.S_IFREG
    if fd >= 0 and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        return FdBodyProducer(reactor, fd)
    cooperator = Cooperator(scheduler=lambda work: reactor.callLater(0, work))
    producer: IBodyProducer = FileBodyProducer(source, cooperator=cooperator)
    return producer


def is_unix_socket(url: str) -> bool:
    """
    Whether ``url`` names a UNIX socket rather than an HTTP address, by the
    rule shared with the Go and TypeScript clients.
    """
    return url.startswith(("/", "./", "../", "~/", "unix://")) or url.endswith(".sock")


def socket_path(url: str) -> str:
    """
    The file system path of the UNIX socket ``url`` names: ``unix://`` is
    dropped and a leading ``~`` expanded.
    """
    path = url[len("unix://"):] if url.startswith("unix://") else url
    return os.path.expanduser(path)


def _base_url(url: str) -> str:
    """``url`` without a trailing slash, with ``http://`` when no scheme is given."""
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


def _path(*segments: str) -> str:
    """An absolute request path from ``segments``, each quoted whole (``/`` included)."""
    return "".join("/" + quote(segment, safe="") for segment in segments)


def _params(params: _Params | None) -> list[tuple[str, str]]:
    """Query pairs from ``params``: ``None`` left out, sequences repeated, numbers as text."""
    pairs: list[tuple[str, str]] = []
    for name, value in (params or {}).items():
        if value is None:
            continue
        values: Iterable[Any] = [value] if isinstance(value, (str, int)) else value
        pairs.extend((name, _text(item)) for item in values)
    return pairs


def _text(value: object) -> str:
    """A query value: booleans as ``true``/``false``, anything else as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _octal(value: int | str | None) -> str | None:
    """A mode as the API's octal text (``0644``); text is sent as given."""
    if value is None or isinstance(value, str):
        return value
    return f"{value:04o}"


def _secret_attributes(permissions: int | str | None, uid: int | None, gid: int | None) -> dict[str, Any]:
    """The attribute fields of a secret's body: only those given."""
    fields: dict[str, Any] = {"permissions": _octal(permissions), "uid": uid, "gid": gid}
    return {name: value for name, value in fields.items() if value is not None}


@implementer(IAgentEndpointFactory)
class _UnixEndpoints:
    """Every URI goes to the one UNIX socket (the Host is meaningless there)."""

    def __init__(self, reactor: IReactorUNIX, path: str) -> None:
        self._reactor = reactor
        self._path = path

    def endpointForURI(self, uri: URI) -> UNIXClientEndpoint:
        return UNIXClientEndpoint(self._reactor, self._path)


class Client:
    """
    A connection to one vmservice daemon.

    :param reactor: the reactor the requests run on (see
        :class:`IClientReactor`).
    :param url: ``http(s)://host:port``, or a UNIX socket path (see
        :func:`is_unix_socket`).
    :param token: the bearer token; no ``Authorization`` header is sent when
        it is ``None`` (a daemon with authentication off).

    Connections are kept open between calls; :meth:`close` closes them.
    """

    def __init__(self, reactor: IClientReactor, url: str = DEFAULT_URL, token: str | None = None) -> None:
        self._reactor = reactor
        self.url = url
        self._token = token
        self._pool: HTTPConnectionPool = DuplexPool(reactor, persistent=True)
        if is_unix_socket(url):
            self._base = _SOCKET_BASE
            agent = Agent.usingEndpointFactory(reactor, _UnixEndpoints(reactor, socket_path(url)), pool=self._pool)
        else:
            self._base = _base_url(url)
            agent = Agent(reactor, pool=self._pool)
        self._http = HTTPClient(agent)

    def tunnel_endpoint(self, hostname: str, upstream: str) -> "TunnelEndpoint":
        """
        A client endpoint whose connections are tunnels to ``upstream``
        (``host:port`` or ``unix:/path``) inside node ``hostname``, through
        ``GET /vm/{hostname}/forward`` as a plain byte pipe (see
        :mod:`vmservice.tunneling`).

        :raise ValueError: an ``https`` URL.
        """
        from .tunneling import TunnelEndpoint, daemon_endpoint

        return TunnelEndpoint(daemon_endpoint(self._reactor, self.url), hostname, upstream, self._token)

    async def close(self) -> None:
        """Close the connections kept for reuse; call it when done with the client."""
        await self._pool.closeCachedConnections()

    # -- the one way requests are made -----------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        params: _Params | None = None,
        json: Any = None,
        *,
        data: IBodyProducer | bytes | None = None,
        headers: Mapping[bytes, bytes] | None = None,
        ok: Sequence[int] = (),
    ) -> IResponse:
        """
        Send one request and answer the response once its headers are in,
        its body unread, so callers can stream it.

        :param path: the request path, built with :func:`_path`.
        :param params: query parameters (see :func:`_params`).
        :param json: a JSON body, or ``None`` for no body.
        :param data: a raw body instead: bytes, or a producer streamed as it
            produces (a :class:`~vmservice._duplex.DuplexBody` is answered as soon as the
            response's headers arrive, before it has been sent whole).
        :param headers: extra headers (``Accept`` replaces the JSON default).
        :param ok: non-2xx statuses the caller handles itself instead of an
            :class:`ApiError` (``HEAD /health`` answers 503 for "unhealthy").
        :raise ApiError: the daemon answered another non-2xx status.
        :raise ConnectFailed: the daemon could not be reached.
        """
        all_headers: dict[bytes | str, list[bytes | str]] = {
            b"User-Agent": [_USER_AGENT],
            b"Accept": [b"application/json"],
        }
        for name, value in (headers or {}).items():
            all_headers[name] = [value]
        if self._token is not None:
            all_headers[b"Authorization"] = [b"Bearer " + self._token.encode("utf-8")]
        kwargs: dict[str, Any] = {}
        if json is not None:
            kwargs["json"] = json
        elif data is not None:
            kwargs["data"] = data
        sent = self._http.request(
            method,
            self._base + path,
            params=_params(params),
            headers=all_headers,
            allow_redirects=False,
            # treq names what it needs of a reactor with a private interface
            # (IReactorTCP, IReactorTime, IReactorPluggableNameResolver), which
            # IClientReactor includes but cannot name.
            reactor=self._reactor,  # type: ignore[arg-type]
            **kwargs,
        )
        try:
            if isinstance(data, DuplexBody):
                response = await _first(data.response, sent)
            else:
                response = await sent
        except (ConnectError, DNSLookupError) as error:
            raise ConnectFailed(self.url, _reason(error)) from error
        if not 200 <= response.code < 300 and response.code not in ok:
            body = await treq.content(response)
            raise ApiError.from_body(response.code, body)
        return response

    async def _request(
        self,
        method: str,
        path: str,
        params: _Params | None = None,
        json: Any = None,
        *,
        ok: Sequence[int] = (),
    ) -> tuple[IResponse, bytes]:
        """Send one request (see :meth:`_send`) and read its whole body."""
        response = await self._send(method, path, params, json, ok=ok)
        body = await treq.content(response)
        return response, body

    async def _json(self, method: str, path: str, params: _Params | None = None, json: Any = None) -> Any:
        """Send a request and decode its JSON answer."""
        response, body = await self._request(method, path, params, json)
        try:
            return _loads(body)
        except ValueError as error:
            raise ApiError(response.code, "invalid_response", f"the daemon's answer is not JSON: {error}") from None

    async def _text(self, method: str, path: str, params: _Params | None = None) -> str:
        """Send a request whose answer is ``text/plain`` and answer that text (UTF-8, invalid bytes replaced)."""
        response = await self._send(method, path, params, headers={b"Accept": b"text/plain, application/json"})
        body = await treq.content(response)
        return body.decode("utf-8", "replace")

    # -- the daemon ------------------------------------------------------

    async def info(self) -> dict[str, Any]:
        """The daemon's version and platform (``GET /info``)."""
        result: dict[str, Any] = await self._json("GET", _path("info"))
        return result

    # -- images ----------------------------------------------------------

    async def images(self) -> list[dict[str, Any]]:
        """The guest images built on the daemon's host (``GET /images``)."""
        result: list[dict[str, Any]] = await self._json("GET", _path("images"))
        return result

    # -- host groups and nodes -------------------------------------------

    async def hostgroups(self) -> list[dict[str, Any]]:
        """Every host group with its limits (``GET /hostgroup``)."""
        result: list[dict[str, Any]] = await self._json("GET", _path("hostgroup"))
        return result

    async def nodes(
        self, group: str | None = None, *, tag: str | None = None, tag_prefix: str | None = None
    ) -> list[dict[str, Any]]:
        """
        The nodes of the daemon, or of one host group, optionally only those
        with an exact ``tag`` or a tag starting with ``tag_prefix``.
        """
        path = _path("hostgroup", group, "nodes") if group is not None else _path("nodes")
        result: list[dict[str, Any]] = await self._json("GET", path, {"tag": tag, "tag_prefix": tag_prefix})
        return result

    async def stats(self) -> list[dict[str, Any]]:
        """
        Every node with its guest's statistics ``snapshot``, or an ``error`` saying why there is none
        (``GET /nodes/stats``).
        """
        result: list[dict[str, Any]] = await self._json("GET", _path("nodes", "stats"))
        return result

    async def node_stats(self, hostname: str) -> dict[str, Any]:
        """One node with its ``snapshot`` or ``error`` (``GET /node/{hostname}/stats``)."""
        result: dict[str, Any] = await self._json("GET", _path("node", hostname, "stats"))
        return result

    async def create_node(
        self, group: str, body: dict[str, Any] | None = None, *, wait: str | None = None, timeout: str | None = None
    ) -> dict[str, Any]:
        """
        Create a node in ``group``.

        :param body: a CreateNodeRequest (``{"tags": [...], "cpus": 1,
            "userdata": "...", "secrets": [...], "ssh_keys": [...]}``); ``None``
            for the group's defaults.
        :param wait: ``"agent"`` to answer only once the guest agent is up
            (and the node's secrets and login are in place); ``"userdata"``
            once its userdata is over too.
        :param timeout: how long ``wait`` may take, as a Go duration
            (``"2m"``); past it the daemon removes the node and answers 408.
        :return: the CreateNodeResponse (``hostname``, ``ip``, ...).
        """
        result: dict[str, Any] = await self._json(
            "POST", _path("hostgroup", group, "nodes"), {"wait": wait, "timeout": timeout}, body or {}
        )
        return result

    async def delete_node(self, group: str, hostname: str) -> dict[str, Any]:
        """Delete node ``hostname`` of ``group``; answers the DeleteResponse."""
        result: dict[str, Any] = await self._json("DELETE", _path("hostgroup", group, "nodes", hostname))
        return result

    # -- one node --------------------------------------------------------

    async def describe(self, hostname: str) -> dict[str, Any]:
        """
        Everything the daemon tells of node ``hostname`` (``GET
        /vm/{hostname}``): the Node fields, ``storage``, ``image``,
        ``network``, ``disk``, ``snapshot``, ``agent_connected``, ``pid`` ...
        """
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname))
        return result

    async def tags(self, hostname: str) -> list[str]:
        """The tags of node ``hostname``, in their order (``GET /vm/{hostname}/tags``)."""
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "tags"))
        tags: list[str] = result["tags"]
        return tags

    async def set_tags(
        self,
        hostname: str,
        *,
        add: Sequence[str] | None = None,
        remove: Sequence[str] | None = None,
        replace: Sequence[str] | None = None,
    ) -> list[str]:
        """
        Change the tags of node ``hostname`` in one atomic step (``PATCH
        /vm/{hostname}/tags``): ``replace`` them all (``[]`` clears them), or
        ``remove`` some and ``add`` others (appended unless there already).
        Only the arguments given are sent; the daemon refuses ``replace``
        with another, and a call with none.

        :return: the node's tags from now on.
        """
        body = {name: list(value) for name, value in (("add", add), ("remove", remove), ("replace", replace))
                if value is not None}
        result: dict[str, Any] = await self._json("PATCH", _path("vm", hostname, "tags"), json=body)
        tags: list[str] = result["tags"]
        return tags

    async def logs(self, hostname: str, lines: int | None = None) -> dict[str, Any]:
        """
        The tail of the node's serial console: the last ``lines`` lines (the
        daemon's default when ``None``; ``0`` for all of it).
        """
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "logs"), {"lines": lines})
        return result

    async def health(self, hostname: str) -> dict[str, Any]:
        """
        The guest agent's health (uptimes in nanoseconds).

        :raise ApiError: status 503 when the agent does not answer.
        """
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "health"))
        return result

    async def healthy(self, hostname: str) -> bool:
        """
        Whether the node's agent answers, asked with ``HEAD`` (no body):
        ``True`` on 200, ``False`` on 503 (it should but does not) and 409 (the
        node is paused, stopped or suspended: no agent can answer).

        :raise ApiError: any other status, e.g. 404 for an unknown node.
        """
        response, _ = await self._request("HEAD", _path("vm", hostname, "health"), ok=(409, 503))
        code: int = response.code
        return code == 200

    # -- lifecycle -------------------------------------------------------

    async def pause(self, hostname: str) -> str:
        """Pause node ``hostname``'s VM (``POST /vm/{hostname}/pause``); answers the daemon's text reply."""
        return await self._text("POST", _path("vm", hostname, "pause"))

    async def resume(self, hostname: str) -> str:
        """Resume a paused node (``POST /vm/{hostname}/resume``); answers the daemon's text reply."""
        return await self._text("POST", _path("vm", hostname, "resume"))

    async def suspend(self, hostname: str) -> str:
        """
        Suspend node ``hostname`` (``POST /vm/{hostname}/suspend``) until
        :meth:`restore`; answers the daemon's text reply.
        """
        return await self._text("POST", _path("vm", hostname, "suspend"))

    async def restore(self, hostname: str, *, wait: str | None = None, timeout: str | None = None) -> str:
        """
        Restore a suspended node (``POST /vm/{hostname}/restore``).

        :param wait: ``"agent"`` to answer only once the guest agent answers.
        :param timeout: how long ``wait`` may take, as a Go duration (``"2m"``).
        :return: the daemon's text reply.
        """
        return await self._text("POST", _path("vm", hostname, "restore"), {"wait": wait, "timeout": timeout})

    async def relaunch(self, hostname: str, *, wait: str | None = None, timeout: str | None = None) -> dict[str, Any]:
        """
        Start node ``hostname``'s VM again (``POST /vm/{hostname}/relaunch``).

        :param wait: ``"agent"`` to answer only once the guest agent answers.
        :param timeout: how long ``wait`` may take, as a Go duration (``"2m"``).
        :return: the CreateNodeResponse (``hostname``, ``ip``, ...), as
            :meth:`create_node` answers it.
        """
        result: dict[str, Any] = await self._json(
            "POST", _path("vm", hostname, "relaunch"), {"wait": wait, "timeout": timeout}
        )
        return result

    async def fork(self, hostname: str, count: int = 1, *, tags: list[str] | None = None,
                   persistent: bool | None = None) -> list[dict[str, Any]]:
        """
        Fork the running node ``hostname`` into ``count`` new nodes that
        continue from its memory and disk (``POST /vm/{hostname}/fork``).

        :param tags: the children's tags.
        :param persistent: whether the children are persistent; ``None``: the parent's.
        :return: the children's CreateNodeResponses, in order.
        """
        body: dict[str, Any] = {"count": count, "tags": tags or []}
        if persistent is not None:
            body["persistent"] = persistent
        result: list[dict[str, Any]] = await self._json("POST", _path("vm", hostname, "fork"), None, body)
        return result

    async def shutdown(self, hostname: str, action: str = "shutdown") -> str:
        """
        Ask node ``hostname``'s guest to power off or restart
        (``POST /vm/{hostname}/shutdown``).

        :param action: ``"shutdown"`` or ``"reboot"``; always sent (the
            daemon's own default is ``reboot``).
        :return: the daemon's text reply.
        """
        return await self._text("POST", _path("vm", hostname, "shutdown"), {"action": action})

    # -- exec ------------------------------------------------------------

    def _exec_params(
        self,
        cmd: str,
        args: Sequence[str],
        env: Mapping[str, str] | Sequence[str] | None,
        uid: int | None,
        gid: int | None,
        cwd: str | None,
        shell: str | None,
        permissions: int | str | None,
        stdout: bool | None,
        stderr: bool | None,
        stdio: str,
    ) -> dict[str, Any]:
        if isinstance(env, Mapping):
            env = [f"{key}={value}" for key, value in env.items()]
        return {
            "cmd": cmd,
            "args": list(args),
            "env": list(env or ()),
            "uid": uid,
            "gid": gid,
            "cwd": cwd,
            "shell": shell,
            "permissions": _octal(permissions),
            "stdout": stdout,
            "stderr": stderr,
            "stdio": stdio,
        }

    async def exec(
        self,
        hostname: str,
        cmd: str,
        args: Sequence[str] = (),
        *,
        on_record: Callable[[ExecRecord], None],
        env: Mapping[str, str] | Sequence[str] | None = None,
        uid: int | None = None,
        gid: int | None = None,
        cwd: str | None = None,
        shell: str | None = None,
        permissions: int | str | None = None,
        stdin: IBodyProducer | IO[bytes] | bytes | None = None,
        stdout: bool | None = None,
        stderr: bool | None = None,
        stdio: str = "base64",
    ) -> ExecRecord:
        """
        Run a command in node ``hostname`` and hand each record of its output
        stream to ``on_record`` as soon as it arrives; nothing is buffered
        beyond one NDJSON line, and a slow ``on_record`` slows the guest.

        :param cmd: a command line for ``shell`` (the daemon's default is
            ``/bin/bash``), or the program itself when ``shell`` is ``""``.
        :param args: words appended to ``cmd``, each quoted as one word (or
            the argv after the program when ``shell`` is ``""``).
        :param on_record: called with every :class:`ExecRecord`, the last
            one (``exit`` or ``error``) included; an exception it raises
            ends the request and is raised here.
        :param env: ``{"K": "V"}`` or ``["K=V", ...]``.
        :param uid: the user to run as (the daemon's default: 0).
        :param gid: the group to run as (the daemon's default: 0).
        :param cwd: the working directory (absolute, ``~`` or relative to the
            user's home).
        :param permissions: the process's umask (``0o022`` or ``"0022"``).
        :param stdin: the process's stdin, streamed while its output comes
            back: a producer, a file object (see :func:`body_producer`: a
            pipe is read as data arrives and sent chunked) or bytes; ``None``
            for no stdin.
        :param stdout: ``False`` to leave stdout out of the stream.
        :param stderr: ``False`` to leave stderr out of the stream.
        :param stdio: ``"base64"`` (exact bytes; the default here) or
            ``"text"`` (the daemon replaces invalid UTF-8).
        :return: the last record: ``exit`` (with ``exit_code`` and
            ``signal``) or ``error`` (could not be started).
        :raise ApiError: an error before the stream started (bad input 400,
            unknown node 404, paused 409, agent not connected 503).
        :raise ExecInterrupted: the stream ended without a last record.
        """
        params = self._exec_params(cmd, args, env, uid, gid, cwd, shell, permissions, stdout, stderr, stdio)
        body: IBodyProducer | bytes | None = None
        if stdin is not None:
            params["stdin"] = True
            body = DuplexBody(self._producer(stdin))
        response = await self._send(
            "POST",
            _path("vm", hostname, "exec"),
            params,
            data=body,
            headers={b"Accept": b"application/x-ndjson", b"Content-Type": b"application/octet-stream"},
        )
        decoder = NdjsonDecoder()
        last: list[ExecRecord] = []

        def deliver(values: list[Any]) -> None:
            for value in values:
                if last:
                    raise ExecInterrupted("records after the last record")
                record = decode_exec_record(value)
                if record.final:
                    last.append(record)
                on_record(record)

        def decode(feed: Callable[[], list[Any]]) -> list[Any]:
            try:
                return feed()
            except ValueError as error:
                raise ExecInterrupted(f"the daemon sent something that is not NDJSON: {error}") from None

        try:
            await treq.collect(response, lambda chunk: deliver(decode(lambda: decoder.feed(chunk))))
            deliver(decode(decoder.finish))
        except ExecInterrupted:
            raise
        except Exception as error:
            if last:
                return last[0]
            if _is_connection_loss(error):
                raise ExecInterrupted(f"the connection to the daemon was lost: {_losses(error)}") from None
            raise
        if not last:
            raise ExecInterrupted("the stream ended without an exit record")
        return last[0]

    async def exec_buffered(
        self,
        hostname: str,
        cmd: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | Sequence[str] | None = None,
        uid: int | None = None,
        gid: int | None = None,
        cwd: str | None = None,
        shell: str | None = None,
        permissions: int | str | None = None,
        stdout: bool | None = None,
        stderr: bool | None = None,
        stdio: str = "base64",
    ) -> ExecResult:
        """
        Run a command and answer its whole output once it has ended
        (``buffered=true``): for short commands whose output fits in memory.
        The parameters are those of :meth:`exec`.

        :raise ApiError: an error before the command ran.
        """
        params = self._exec_params(cmd, args, env, uid, gid, cwd, shell, permissions, stdout, stderr, stdio)
        params["buffered"] = True
        result = await self._json("POST", _path("vm", hostname, "exec"), params)
        if not isinstance(result, dict):
            raise ApiError(200, "invalid_response", "the daemon's answer is not an ExecResult")
        encoding = result.get("encoding")
        try:
            out, err = _payload(result.get("stdout"), encoding), _payload(result.get("stderr"), encoding)
        except ExecInterrupted as error:
            raise ApiError(200, "invalid_response", str(error)) from None
        exit_code = result.get("exit_code")
        return ExecResult(
            stdout=out,
            stderr=err,
            exit_code=exit_code if isinstance(exit_code, int) else 0,
            pid=_optional(result.get("pid"), int),
            signal=_optional(result.get("signal"), str) or None,
            error=_optional(result.get("error"), str) or None,
            started_at=_optional(result.get("started_at"), str),
            ended_at=_optional(result.get("ended_at"), str),
        )

    def _producer(self, source: IBodyProducer | IO[bytes] | bytes) -> IBodyProducer:
        if IBodyProducer.providedBy(source):
            return source
        if isinstance(source, (bytes, bytearray, memoryview)):
            import io

            return body_producer(self._reactor, io.BytesIO(bytes(source)))
        return body_producer(self._reactor, source)

    # -- background execs ------------------------------------------------

    async def exec_background(
        self,
        hostname: str,
        cmd: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | Sequence[str] | None = None,
        uid: int | None = None,
        gid: int | None = None,
        cwd: str | None = None,
        shell: str | None = None,
        permissions: int | str | None = None,
        ring_bytes: int | None = None,
    ) -> dict[str, Any]:
        """
        Start a command in the background (``background=true``): it runs in the
        guest on its own, its output kept there in a ring of ``ring_bytes``
        (the daemon's default: 1 MiB).  The other parameters are those of :meth:`exec`.

        :return: ``{exec_id, pid, started_at, ring_bytes}``.
        """
        params = self._exec_params(cmd, args, env, uid, gid, cwd, shell, permissions, None, None, "base64")
        params.update(background=True, ring_bytes=ring_bytes)
        result: dict[str, Any] = await self._json("POST", _path("vm", hostname, "exec"), params)
        return result

    async def background_execs(self, hostname: str) -> list[dict[str, Any]]:
        """The node's background execs, running or ended and not deleted (``GET /vm/{hostname}/exec``)."""
        result: list[dict[str, Any]] = await self._json("GET", _path("vm", hostname, "exec"))
        return result

    async def background_exec(self, hostname: str, exec_id: str) -> dict[str, Any]:
        """One background exec."""
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "exec", exec_id))
        return result

    async def exec_logs(
        self,
        hostname: str,
        exec_id: str,
        *,
        on_record: Callable[[ExecRecord], None],
        from_id: int | None = None,
        follow: bool = False,
    ) -> None:
        """
        Hand each frame of a background exec's log to ``on_record`` as it
        arrives (``stdout``/``stderr`` with their bytes and ``id``, ``gap``
        when frames were dropped before they were read, ``exit`` last).

        :param from_id: the first frame wanted (a client resuming gives its
            last id + 1); ``None`` for the oldest kept.
        :param follow: go on until the exec ends instead of stopping at the
            end of what is kept now.
        """
        params = {"from_id": from_id, "follow": True if follow else None}
        response = await self._send("GET", _path("vm", hostname, "exec", exec_id, "logs"), params,
                                    headers={b"Accept": b"application/x-ndjson"})
        decoder = NdjsonDecoder()

        def deliver(values: list[Any]) -> None:
            for value in values:
                on_record(decode_exec_record(value))

        await treq.collect(response, lambda chunk: deliver(decoder.feed(chunk)))
        deliver(decoder.finish())

    async def kill_exec(
        self, hostname: str, exec_id: str, signal: str | None = None, grace_ms: int | None = None
    ) -> dict[str, Any]:
        """
        Signal a background exec's process group (``TERM`` by default, then
        ``KILL`` after ``grace_ms``, 5000 by default).

        :return: ``{exec_id, pid, running, signal_sent}``.
        """
        body = {key: value for key, value in (("signal", signal), ("grace_ms", grace_ms)) if value is not None}
        result: dict[str, Any] = await self._json("POST", _path("vm", hostname, "exec", exec_id, "kill"), json=body)
        return result

    async def wait_exec(self, hostname: str, exec_id: str, timeout: int | None = None) -> dict[str, Any]:
        """
        Wait up to ``timeout`` whole seconds (the daemon's default: 30) for a
        background exec to end; ``timed_out`` says whether it still runs.
        """
        result: dict[str, Any] = await self._json(
            "GET", _path("vm", hostname, "exec", exec_id, "wait-exit"), {"timeout": timeout}
        )
        return result

    async def delete_exec(self, hostname: str, exec_id: str) -> dict[str, Any]:
        """Forget a background exec that has ended (409 while it runs)."""
        result: dict[str, Any] = await self._json("DELETE", _path("vm", hostname, "exec", exec_id))
        return result

    # -- copies ----------------------------------------------------------

    async def upload(
        self,
        hostname: str,
        path: str,
        body: IBodyProducer | IO[bytes] | bytes,
        *,
        mode: str = "binary",
        uid: int | None = None,
        gid: int | None = None,
        permissions: int | str | None = None,
        source_name: str | None = None,
        source_type: str | None = None,
        copy_contents: bool = False,
        exclude: Sequence[str] = (),
        unpacked_size: int | None = None,
    ) -> None:
        """
        Copy into node ``hostname`` (``POST /vm/{hostname}/cp``), streaming
        ``body`` as it is read: nothing is held in memory.

        :param path: the destination in the guest: with ``binary`` and
            ``tar``, the file, or the directory the tar is extracted under;
            with the ``cp-v1-*`` modes, the destination as ``cp`` reads it
            (an existing directory receives ``source_name``).
        :param body: the file's bytes or an uncompressed tar stream: bytes, a
            file object (a pipe is sent chunked, see :func:`body_producer`)
            or a producer.
        :param mode: ``"binary"``, ``"tar"``, ``"cp-v1-binary"`` or ``"cp-v1-tar"``.
        :param uid: the owner to give what is written (and whose ``~`` it is).
        :param gid: the group to give what is written.
        :param permissions: the file's mode (``0o644`` or ``"0644"``).
        :param source_name: cp-v1: the base name of what is copied.
        :param source_type: cp-v1: ``file`` or ``directory`` (by default the mode's).
        :param copy_contents: cp-v1: a directory's contents go into (merge with) ``path``.
        :param exclude: patterns of tar entries the guest leaves out.
        :param unpacked_size: the bytes the upload unpacks to: the guest
            refuses it (507) before writing anything when they do not fit.
        :raise ApiError: the daemon refused (404 unknown node, 400 bad path,
            409 paused, 503 no agent, 507 no room...).
        """
        tar = mode in ("tar", "cp-v1-tar") or source_type == "directory"
        params: dict[str, Any] = {"path": path, "mode": mode, "uid": uid, "gid": gid,
                                  "permissions": _octal(permissions)}
        if mode in CP_V1_MODES:
            params.update(copy_semantics="cp-v1", source_name=source_name,
                          source_type=source_type or ("directory" if tar else "file"),
                          copy_contents=copy_contents or None)
        params["exclude"] = list(exclude)
        headers = {b"Content-Type": b"application/x-tar" if tar else b"application/octet-stream"}
        if unpacked_size is not None:
            headers[b"X-Slicer-Unpacked-Size"] = str(unpacked_size).encode("ascii")
        response = await self._send(
            "POST",
            _path("vm", hostname, "cp"),
            params,
            data=self._producer(body) if not isinstance(body, bytes) else body,
            headers=headers,
        )
        await treq.content(response)

    async def download(
        self,
        hostname: str,
        path: str,
        *,
        write: Callable[[bytes], None] | None = None,
        sink: Callable[[Download], Callable[[bytes], None]] | None = None,
        mode: str = "binary",
        exclude: Sequence[str] = (),
        uid: int | None = None,
    ) -> Download:
        """
        Copy out of node ``hostname`` (``GET /vm/{hostname}/cp``), handing
        each chunk to ``write`` as it arrives (a slow ``write`` slows the
        transfer rather than growing memory).

        :param path: the file (binary) or the file or directory (tar).
        :param write: called with each chunk of the file or tar stream; an
            exception it raises ends the transfer and is raised here.
        :param sink: instead of ``write``: called once the headers are in
            (with what they say: a file's bytes or a tar, the source's type
            and name), answers the ``write`` for the body; an exception it
            raises drops the connection and is raised here.
        :param mode: ``"binary"``, ``"tar"``, ``"cp-v1-binary"``,
            ``"cp-v1-tar"`` or ``"cp-v1-recursive"`` (a file's bytes or a
            directory's tar, as the source is).
        :param exclude: patterns of entries the guest leaves out of a tar.
        :param uid: whose home directory ``~`` is in ``path``.
        :return: the file mode, length, type and name the daemon announced.
        :raise ApiError: 404 no such path, 400 a directory in binary mode, ...
        """
        if mode == "cp-v1-recursive":
            accept = b"application/octet-stream, application/x-tar"
        elif mode in ("tar", "cp-v1-tar"):
            accept = b"application/x-tar"
        else:
            accept = b"application/octet-stream"
        params: dict[str, Any] = {"path": path, "mode": mode}
        if mode in CP_V1_MODES:
            params["copy_semantics"] = "cp-v1"
        params.update(exclude=list(exclude), uid=uid)
        response = await self._send("GET", _path("vm", hostname, "cp"), params, headers={b"Accept": accept})
        info = _download_info(response)
        if write is None:
            if sink is None:
                raise TypeError("download() needs write or sink")
            try:
                write = sink(info)
            except BaseException:
                abandon = _Abandon()
                response.deliverBody(abandon)
                await abandon.done
                raise
        await treq.collect(response, write)
        return info

    # -- file system -----------------------------------------------------

    async def readdir(self, hostname: str, path: str) -> list[dict[str, Any]]:
        """
        The entries of directory ``path`` in the guest, sorted by name: FsEntry
        objects (``name``, ``type``, ``size``, ``mtime`` RFC 3339, ``mode``
        octal text).
        """
        result: list[dict[str, Any]] = await self._json("GET", _path("vm", hostname, "fs", "readdir"), {"path": path})
        return result

    async def stat(self, hostname: str, path: str) -> dict[str, Any]:
        """The FsEntry of ``path`` (a symlink is not followed); 404 ApiError when missing."""
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "fs", "stat"), {"path": path})
        return result

    async def mkdir(
        self, hostname: str, path: str, *, recursive: bool = False, mode: int | str | None = None
    ) -> dict[str, Any]:
        """
        Make directory ``path`` (with its parents when ``recursive``, like
        ``mkdir -p``), with ``mode`` (the daemon's default ``0755``); answers
        its FsEntry.
        """
        body: dict[str, Any] = {"path": path}
        if recursive:
            body["recursive"] = True
        if mode is not None:
            body["mode"] = _octal(mode)
        result: dict[str, Any] = await self._json("POST", _path("vm", hostname, "fs", "mkdir"), json=body)
        return result

    async def remove(self, hostname: str, path: str, *, recursive: bool = False) -> dict[str, Any]:
        """
        Remove ``path`` (a directory's contents too when ``recursive``; a
        non-empty directory without it is a 409 ApiError); answers the
        FsEntry as it was.
        """
        result: dict[str, Any] = await self._json(
            "DELETE", _path("vm", hostname, "fs", "remove"), {"path": path, "recursive": recursive or None}
        )
        return result

    # -- secrets ---------------------------------------------------------

    async def secrets(self) -> list[dict[str, Any]]:
        """
        The metadata of every stored secret (``GET /secrets``): ``name``,
        ``size``, ``permissions`` (octal text), ``uid``, ``gid``, ``mod_time``;
        the daemon never sends a secret's content.
        """
        result: list[dict[str, Any]] = await self._json("GET", _path("secrets"))
        return result

    async def create_secret(
        self, name: str, data: bytes, *, permissions: int | str | None = None, uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        """
        Store a new secret ``name`` holding ``data`` (``POST /secrets``; sent
        as base64), placed in guests as ``/run/secrets/NAME`` with
        ``permissions`` (daemon default ``0600``), ``uid`` and ``gid``
        (default 0).

        :raise ApiError: 409 (``secret_exists``) when it exists, 400 for a
            bad name or too much content.
        """
        body: dict[str, Any] = {"name": name, "data": base64.b64encode(data).decode("ascii")}
        body.update(_secret_attributes(permissions, uid, gid))
        await self._request("POST", _path("secrets"), json=body)

    async def update_secret(
        self, name: str, data: bytes | None = None, *, permissions: int | str | None = None,
        uid: int | None = None, gid: int | None = None,
    ) -> None:
        """
        Change secret ``name`` (``PATCH /secrets/{secret}``): only what is
        given; running nodes that hold it get the change at once.

        :raise ApiError: 404 (``secret_not_found``) when there is none.
        """
        body: dict[str, Any] = {} if data is None else {"data": base64.b64encode(data).decode("ascii")}
        body.update(_secret_attributes(permissions, uid, gid))
        await self._request("PATCH", _path("secrets", name), json=body)

    async def delete_secret(self, name: str) -> None:
        """
        Delete secret ``name`` (``DELETE /secrets/{secret}``); running nodes
        that hold it lose its file.

        :raise ApiError: 404 (``secret_not_found``) when there is none.
        """
        await self._request("DELETE", _path("secrets", name))


    async def shell(
        self,
        hostname: str,
        *,
        uid: int | None = None,
        gid: int | None = None,
        shell: str | None = None,
        cwd: str | None = None,
    ) -> ShellSession:
        """
        Open an interactive shell in node ``hostname`` (``GET /vm/{hostname}/shell``,
        a WebSocket, over TCP or the UNIX socket): an open
        :class:`~vmservice.shell_session.ShellSession`::

            session = await client.shell("demo-1")
            session.resize(80, 24)
            session.write(b"ls\r")
            while (chunk := await session.read()) is not None:
                ...

        :raise ShellError: the daemon refused (its status and ErrorResponse:
            404 no node, 409 paused, 400 bad cwd or shell ...), or could not be reached.
        """
        path = shell_path(hostname, uid, gid, shell, cwd)
        unix = socket_path(self.url) if is_unix_socket(self.url) else None
        return await open_shell(self._reactor, self._base, unix, self._token, path)

    async def watch(
        self,
        hostname: str,
        paths: Sequence[str],
        *,
        patterns: Sequence[str] = (),
        events: Sequence[str] = (),
        recursive: bool = False,
        one_shot: bool = False,
        debounce: str | None = None,
        timeout: str | None = None,
        max_events: int | None = None,
        uid: int | None = None,
        last_event_id: int | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """
        Watch paths in node ``hostname`` (``GET /vm/{hostname}/fs/watch``): an
        asynchronous iterator of events, each the decoded JSON object ``{id,
        type, path, timestamp, size, isDir, message?}``, as they happen::

            async for event in client.watch("demo-1", ["/srv"], recursive=True):
                print(event["type"], event["path"])

        The request is made when iteration starts; iteration ends when the
        daemon closes the stream (``one_shot``, ``max_events``, ``timeout``,
        or nothing left to watch).  Leaving the loop early closes the
        connection (at once with ``contextlib.aclosing``, else when the
        iterator is collected), and the daemon removes the watch.  A
        consumer slower than the events pauses the connection; the guest
        then drops events and reports an ``overflow``.

        :param paths: what to watch: absolute, ``~`` or ``~/...`` (the home of ``uid``).
        :param patterns: globs on an entry's base name (any matches).
        :param events: the types to report (``create``, ``write``, ``remove``,
            ``rename``, ``chmod``); all when empty.
        :param recursive: watch below directories too, new ones included.
        :param one_shot: end after the first event.
        :param debounce: a Go duration within which events of one type and
            path become one (``"200ms"``).
        :param timeout: a Go duration after which the stream ends.
        :param max_events: end after this many events.
        :param uid: whose home ``~`` is (the daemon's default: root).
        :param last_event_id: sent as ``Last-Event-ID``: ids continue after it.
        :raise ApiError: before the first event (400 bad input, 404 unknown
            node or missing path, 409 paused, 503 agent not connected).
        :raise WatchInterrupted: the connection was lost mid-stream.
        """
        headers = {b"Accept": b"text/event-stream"}
        if last_event_id is not None:
            headers[b"Last-Event-ID"] = str(last_event_id).encode("ascii")
        params = {
            "paths": list(paths),
            "patterns": list(patterns),
            "events": list(events),
            "recursive": recursive or None,
            "one_shot": one_shot or None,
            "debounce": debounce,
            "timeout": timeout,
            "max_events": max_events,
            "uid": uid,
        }
        response = await self._send("GET", _path("vm", hostname, "fs", "watch"), params, headers=headers)
        async with aclosing(_events_of(response)) as stream:
            async for event in stream:
                yield event

    async def events(
        self,
        *,
        hostgroup: str | None = None,
        tag: str | None = None,
        last_event_id: int | None = None,
        follow: bool = True,
    ) -> AsyncIterator[dict[str, Any]]:
        """
        The nodes' lifecycle events (``GET /events``, an extension): an
        asynchronous iterator of the decoded JSON objects ``{id, time, type,
        hostname, hostgroup, status, tags, exit_code?}`` as they happen, and a
        ``{"type": "gap", ...}`` when a replay asked for more than the daemon
        keeps::

            async for event in client.events(hostgroup="demo"):
                print(event["id"], event["type"], event["hostname"])

        Following, the stream does not end on its own: leave the loop to
        close it (at once with ``contextlib.aclosing``).

        :param hostgroup: only events of this host group's nodes.
        :param tag: only events of nodes with this tag.
        :param last_event_id: replay what came after this id first (sent as
            ``Last-Event-ID``); ``None``: only new events.
        :param follow: ``False``: end once the replay is over.
        :raise ApiError: before the first event (400 bad input, 404 unknown host group).
        :raise WatchInterrupted: the connection was lost.
        """
        headers = {b"Accept": b"text/event-stream"}
        if last_event_id is not None:
            headers[b"Last-Event-ID"] = str(last_event_id).encode("ascii")
        response = await self._send("GET", "/events", {"hostgroup": hostgroup, "tag": tag, "follow": None if follow else False},
                                   headers=headers)
        async with aclosing(_events_of(response)) as stream:
            async for event in stream:
                yield event


async def _events_of(response: IResponse) -> AsyncGenerator[dict[str, Any], None]:
    """The events of a Server-Sent Events response, decoded, until it ends; leaving the loop stops reading."""
    body = _EventBody()
    response.deliverBody(body)
    try:
        while True:
            event = await body.next_event()
            if event is None:
                return
            yield event
    finally:
        body.stop()


async def _first(early: Deferred[IResponse], sent: Deferred[IResponse]) -> IResponse:
    """
    The response of a duplex request: from ``early`` (headers parsed) or
    ``sent`` (the request finished), whichever comes first; a failure of
    ``sent`` wins when ``early`` has not fired.  The other one's later result
    is consumed, so it is never reported as unhandled.
    """
    result: Deferred[IResponse] = Deferred()

    def won(value: IResponse) -> None:
        if not result.called:
            result.callback(value)

    def lost(failure: Failure) -> None:
        if not result.called:
            result.errback(failure)

    early.addCallback(won)
    sent.addCallbacks(won, lost)
    return await result


def _is_connection_loss(error: Exception) -> bool:
    return isinstance(error, (ResponseFailed, RequestTransmissionFailed))


def _losses(error: Exception) -> str:
    reasons = getattr(error, "reasons", None) or []
    return "; ".join(reason.getErrorMessage() for reason in reasons) or type(error).__name__


def _loads(body: bytes) -> Any:
    return json.loads(body.decode("utf-8"))


def _reason(error: Exception) -> str:
    """The operating system's words for a failed connection, without Twisted's prefix."""
    os_error = getattr(error, "osError", None)
    if isinstance(os_error, str) and os_error:
        return os_error.rstrip(".")
    if isinstance(os_error, int):
        return os.strerror(os_error)
    return str(error).rstrip(".") or type(error).__name__
