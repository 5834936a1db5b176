# -*- test-case-name: tests.cli.test_terminal,tests.integration.test_shell,tests.integration.test_shell_client -*-
"""
The client's end of ``GET /vm/{hostname}/shell``: an autobahn WebSocket
client over TCP or the daemon's UNIX socket, offered as an asynchronous
:class:`ShellSession` (:meth:`vmservice.client.Client.shell` opens one).

Each message is one frame of :mod:`vmservice.wire.shellframes`.  The session
reads the terminal's output with :meth:`ShellSession.read` (``None`` once
the shell ended), types with :meth:`~ShellSession.write`, resizes with
:meth:`~ShellSession.resize`; :meth:`~ShellSession.close` sends SHUTDOWN and
closes (the guest hangs the shell up).  Output not yet read beyond
:data:`HIGH_WATER` chunks pauses the socket, so a slow reader holds the
remote program back.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlencode, urlsplit

from autobahn.twisted.websocket import WebSocketClientFactory, WebSocketClientProtocol
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import HostnameEndpoint, UNIXClientEndpoint
from twisted.internet.error import ConnectError, DNSLookupError
from twisted.internet.interfaces import IStreamClientEndpoint

from ..wire.shellframes import (
    DATA,
    HEARTBEAT,
    MAX_MESSAGE,
    SESSION_CLOSE,
    SHUTDOWN,
    FrameError,
    decode_message,
    encode_data,
    encode_frame,
    encode_window_size,
)

if TYPE_CHECKING:
    from .reactors import IClientReactor

#: Output chunks held unread before the socket is paused.
HIGH_WATER = 64


class ShellError(Exception):
    """
    The shell could not be opened: the daemon answered other than 101.

    :ivar status: the HTTP status (0 when the connection failed before one).
    :ivar body: what followed the status's headers (an ErrorResponse), possibly empty.
    """

    def __init__(self, status: int, message: str, body: bytes = b"") -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message
        self.body = body

    def __str__(self) -> str:
        return self.message


class ShellSession:
    """
    An open shell.

    :ivar close_code: the WebSocket close code once the socket closed (1000:
        the shell exited or was shut down), else ``None``.
    :ivar close_reason: why the socket closed, as autobahn reports it.
    :ivar session_closed: whether the daemon sent SESSION_CLOSE (the shell ended).
    """

    def __init__(self) -> None:
        self._protocol: Optional[_ShellClientProtocol] = None
        self._chunks: deque[bytes] = deque()
        self._waiting: Optional[Deferred[None]] = None
        self._paused = False
        self.close_code: Optional[int] = None
        self.session_closed = False
        self.close_reason: Optional[str] = None
        self._closed = False
        self.ended: Deferred[Optional[int]] = Deferred()

    # -- what the caller does ----------------------------------------------------------

    async def read(self) -> Optional[bytes]:
        """The next output of the terminal, or ``None`` once the socket closed."""
        while not self._chunks:
            if self._closed:
                return None
            self._waiting = Deferred()
            await self._waiting
        chunk = self._chunks.popleft()
        if self._paused and len(self._chunks) < HIGH_WATER // 2 and self._protocol is not None:
            self._paused = False
            self._transport_call("resumeProducing")
        return chunk

    def write(self, data: bytes) -> None:
        """Type ``data`` (DATA messages of at most 32 KiB)."""
        for message in encode_data(data):
            self._send(message)

    def resize(self, cols: int, rows: int) -> None:
        """Tell the remote terminal its size (WINDOW_SIZE)."""
        self._send(encode_window_size(cols, rows))

    def heartbeat(self) -> None:
        """Send a HEARTBEAT (clients send one every 30 s)."""
        self._send(encode_frame(HEARTBEAT))

    def close(self) -> None:
        """SHUTDOWN, then close the socket (the remote shell is hung up)."""
        if self._protocol is not None and not self._closed:
            self._send(encode_frame(SHUTDOWN))
            self._protocol.sendClose(1000)

    def abort(self) -> None:
        """Drop the connection without a close handshake."""
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.abortConnection()  # type: ignore[attr-defined]

    # -- from the protocol -------------------------------------------------------------

    def _send(self, message: bytes) -> None:
        if self._protocol is not None and not self._closed:
            self._protocol.sendMessage(message, isBinary=True)  # type: ignore[no-untyped-call]

    def _transport_call(self, name: str) -> None:
        transport: Any = self._protocol.transport if self._protocol is not None else None
        if transport is not None:
            getattr(transport, name)()

    def _output(self, data: bytes) -> None:
        self._chunks.append(data)
        if len(self._chunks) >= HIGH_WATER and not self._paused:
            self._paused = True
            self._transport_call("pauseProducing")
        self._wake()

    def _wake(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.callback(None)

    def _lost(self, code: Optional[int]) -> None:
        self._closed = True
        self.close_code = code
        self._wake()
        if not self.ended.called:
            self.ended.callback(code)


class _ShellClientProtocol(WebSocketClientProtocol):
    def __init__(self, session: ShellSession, opened: Deferred[ShellSession]) -> None:
        super().__init__()
        self._session = session
        self._opened = opened

    def onOpen(self) -> None:
        self._session._protocol = self
        self._opened.callback(self._session)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if not isBinary:
            return
        try:
            frame = decode_message(payload)
        except FrameError:
            return
        if frame.kind == DATA:
            self._session._output(frame.payload)
        elif frame.kind in (SESSION_CLOSE, SHUTDOWN):
            self._session.session_closed = True

    def onClose(self, wasClean: bool, code: Optional[int], reason: Optional[str]) -> None:
        if not self._opened.called:
            self._opened.errback(self._refusal(reason))
            return
        self._session.close_reason = reason
        self._session._lost(code)

    def _refusal(self, reason: Optional[str]) -> ShellError:
        line = getattr(self, "http_status_line", None)
        status = 0
        if isinstance(line, str) and len(line.split()) >= 2 and line.split()[1].isdigit():
            status = int(line.split()[1])
        data = bytes(getattr(self, "data", b"") or b"")
        body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else data
        message = reason or f"the shell could not be opened (HTTP {status})"
        try:
            import json

            decoded = json.loads(body)
            if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
                message = decoded["error"]
        except ValueError:
            pass
        return ShellError(status, message, body)


def shell_path(hostname: str, uid: Optional[int] = None, gid: Optional[int] = None, shell: Optional[str] = None,
               cwd: Optional[str] = None) -> str:
    """The request path and query of a shell (uid/gid only when non-zero, as existing clients send them)."""
    from urllib.parse import quote

    query: list[tuple[str, str]] = []
    if shell:
        query.append(("shell", shell))
    if uid:
        query.append(("uid", str(uid)))
    if gid:
        query.append(("gid", str(gid)))
    if cwd:
        query.append(("cwd", cwd))
    path = f"/vm/{quote(hostname, safe='')}/shell"
    return path + ("?" + urlencode(query) if query else "")


async def open_shell(reactor: IClientReactor, base_url: str, unix_path: Optional[str], token: Optional[str], path: str,
                     timeout: float = 30.0) -> ShellSession:
    """
    Open a shell: dial the daemon, upgrade, and answer the open session.

    :param reactor: ``IReactorTCP``, ``IReactorUNIX`` and ``IReactorTime``.
    :param base_url: ``http://host:port`` (ignored but for the Host header over a UNIX socket).
    :param unix_path: the daemon's UNIX socket, or ``None`` for TCP.
    :param token: the bearer token, or ``None``.
    :param path: from :func:`shell_path`.
    :raise ShellError: the daemon refused (its status and ErrorResponse), or
        the connection failed (status 0).
    """
    split = urlsplit(base_url)
    host = split.hostname or "localhost"
    port = split.port or (443 if split.scheme == "https" else 80)
    url = f"ws://{host}:{port}{path}"
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    factory = WebSocketClientFactory(url, headers=headers)  # type: ignore[no-untyped-call]
    factory.setProtocolOptions(  # type: ignore[no-untyped-call]
        maxMessagePayloadSize=4 * MAX_MESSAGE, maxFramePayloadSize=4 * MAX_MESSAGE, openHandshakeTimeout=timeout,
        closeHandshakeTimeout=5.0,
    )
    session = ShellSession()
    opened: Deferred[ShellSession] = Deferred()
    factory.protocol = lambda: _ShellClientProtocol(session, opened)  # type: ignore[assignment]
    endpoint: IStreamClientEndpoint
    if unix_path is not None:
        endpoint = UNIXClientEndpoint(reactor, unix_path, timeout=int(timeout))
    else:
        endpoint = HostnameEndpoint(reactor, host, port, timeout=timeout)
    try:
        await endpoint.connect(factory)
    except (ConnectError, DNSLookupError, OSError) as e:
        raise ShellError(0, f"cannot connect to the daemon: {e}") from None
    return await opened


__all__ = ["HIGH_WATER", "ShellError", "ShellSession", "open_shell", "shell_path"]
