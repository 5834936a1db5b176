# -*- test-case-name: tests.api.test_vm -*-
"""
The answer of ``GET /vm/{hostname}/logs?lines=0``: the LogsResponse of a
node's whole console, written as it is read instead of built in memory.

The JSON's head (``{"hostname": ..., "content": "``) goes out once the first
piece of the console was read (a log that cannot be read is still an
ordinary error answer), then each piece escaped as a JSON string's inside,
then the line count (``", "lines": N}``), the one field known only at the end.
One piece is read at a time, off the reactor, and the next only once the
client has taken the last: a slow client holds no thread and no more than
one piece of memory.  A read that fails after the head went out drops the
connection, so the client sees a truncated answer, never a wrong one.
"""

from __future__ import annotations

import json

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from twisted.web.server import Request
from zope.interface import implementer

from ..errors import ServiceError
from ..nodes.console import ConsoleStream
from .streaming import drop_connection

log = Logger()


@implementer(IPushProducer)
class ClientPace:
    """The client's pace: paused while the connection's send buffer is full."""

    def __init__(self) -> None:
        #: Fires when the client takes more; ``None`` while it does.
        self._resumed: Deferred[None] | None = None

    def ready(self) -> Deferred[None]:
        """Fires once the client takes more (at once unless paused)."""
        return succeed(None) if self._resumed is None else self._resumed

    def pauseProducing(self) -> None:
        if self._resumed is None:
            self._resumed = Deferred()

    def resumeProducing(self) -> None:
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            resumed.callback(None)

    def stopProducing(self) -> None:
        # The client went away: Klein cancels the handler, whose wait ends here.
        self.resumeProducing()


async def write_console(request: Request, hostname: str, console: ConsoleStream) -> bytes:
    """
    Write the LogsResponse of ``console`` on ``request``, streamed; closes
    ``console`` however it ends.

    :return: nothing more to write (Klein finishes the request).
    :raise ServiceError: the console cannot be read (before anything was written).
    """
    pace = ClientPace()
    try:
        piece = await console.read()
        request.setResponseCode(200)
        request.setHeader(b"Content-Type", b"application/json")
        request.setHeader(b"Cache-Control", b"no-store")
        request.registerProducer(pace, True)
        try:
            request.write(b'{"hostname": ' + json.dumps(hostname).encode() + b', "content": "')
            while piece:
                request.write(json.dumps(piece)[1:-1].encode())
                await pace.ready()
                piece = await console.read()
            request.write(b'", "lines": %d}\n' % console.lines)
        except ServiceError as error:
            log.warn("console of {hostname} cut short: {error}", hostname=hostname, error=error)
            drop_connection(request)
        finally:
            if request.channel is not None:  # None once the client went away
                request.unregisterProducer()
    finally:
        await console.close()
    return b""


__all__ = ["ClientPace", "write_console"]
