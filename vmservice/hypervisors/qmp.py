# -*- test-case-name: tests.hypervisors.test_qmp -*-
"""
A QMP (QEMU Machine Protocol) client protocol.

QMP is line-delimited JSON over a socket: the server greets with ``{"QMP":
...}``, the client must send ``qmp_capabilities``, then each ``{"execute":
...}`` is answered by ``{"return": ...}`` or ``{"error": ...}`` in order, with
asynchronous ``{"event": ...}`` messages interleaved.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Callable, TypeAlias

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IUNIXTransport
from twisted.protocols.basic import LineOnlyReceiver
from twisted.python.failure import Failure


#: A JSON value as QEMU sends it.
JSON: TypeAlias = "dict[str, JSON] | list[JSON] | str | int | float | bool | None"

#: A JSON object: QMP's greetings, events and most answers.
JSONObject: TypeAlias = "dict[str, JSON]"


class QMPError(Exception):
    """QEMU answered a command with an error, or the monitor went away."""


class QMPProtocol(LineOnlyReceiver):
    """
    One QMP session.

    :ivar ready: fires with the greeting once capabilities are negotiated.
    :ivar on_event: called with each event dict QEMU sends.
    """

    delimiter = b"\n"
    MAX_LENGTH = 1 << 20

    def __init__(self, on_event: Callable[[JSONObject], None] | None = None) -> None:
        """
        :param on_event: called with each event QEMU sends; by default
            events are dropped.
        """
        self.ready: Deferred[JSONObject] = Deferred()
        self.on_event = on_event or (lambda event: None)
        self._pending: deque[Deferred[JSON]] = deque()
        self._greeting: JSONObject | None = None
        self._lost = False

    @property
    def lost(self) -> bool:
        """Whether the connection is gone (commands fail at once)."""
        return self._lost

    def lineReceived(self, line: bytes) -> None:
        """
        Take one message: the greeting, an event, or the answer to the oldest command.

        :param line: one line of JSON (other lines are ignored).
        """
        line = line.strip()
        if not line:
            return
        try:
            message = json.loads(line)
        except ValueError:
            return
        if "QMP" in message and self._greeting is None:
            self._greeting = message
            self._send({"execute": "qmp_capabilities"})
            negotiated: Deferred[JSON] = Deferred()
            self._pending.append(negotiated)
            negotiated.addCallbacks(
                lambda _: self.ready.callback(message), self.ready.errback
            )
            return
        if "event" in message:
            self.on_event(message)
            return
        if not self._pending:
            return
        waiting = self._pending.popleft()
        if "error" in message:
            error = message["error"]
            waiting.errback(QMPError(f"{error.get('class')}: {error.get('desc')}"))
        else:
            waiting.callback(message.get("return"))

    def execute(self, command: str, **arguments: JSON) -> Deferred[JSON]:
        """
        Run a QMP command.

        :param command: the QMP command name, e.g. ``query-status``.
        :param arguments: its arguments.
        :return: a Deferred firing with the ``return`` value, or failing with
            :class:`QMPError`.
        """
        if self._lost:
            return fail(QMPError("QMP connection lost"))
        message: JSONObject = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        result: Deferred[JSON] = Deferred()
        self._pending.append(result)
        self._send(message)
        return result

    def send_fd(self, fd: int) -> None:
        """
        Pass the open file descriptor ``fd`` to QEMU (``SCM_RIGHTS``) with the
        next bytes written: QEMU holds it for the next ``getfd`` command, which
        the caller sends right after.  The caller keeps its own descriptor and
        closes it once ``getfd`` is answered.

        :raise QMPError: the connection is gone, or is not a UNIX socket.
        """
        if self._lost or not IUNIXTransport.providedBy(self.transport):
            raise QMPError("cannot pass a file descriptor: no QMP connection over a UNIX socket")
        IUNIXTransport(self.transport).sendFileDescriptor(fd)

    def _send(self, message: JSONObject) -> None:
        self.sendLine(json.dumps(message).encode())  # type: ignore[no-untyped-call]  # LineOnlyReceiver.sendLine has no annotations

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        """
        Fail every command still waiting, and the greeting if it never came.

        :param reason: why the connection ended (each waiting command fails
            with :class:`QMPError` whatever it is).
        """
        self._lost = True
        pending, self._pending = self._pending, deque()
        for waiting in pending:
            waiting.errback(QMPError("QMP connection lost"))
        if not self.ready.called:
            self.ready.errback(QMPError("QMP connection lost before greeting"))
