# -*- test-case-name: tests.api.test_paced_body -*-
"""
A whole response body written at the client's pace.

A handler that returns its body hands all of it to the connection at once,
where it waits in the transport's buffer for as long as the client takes to
read it.  :func:`write_paced` keeps the body instead and writes it in
:data:`CHUNK` pieces as the client reads: it is the request's push producer,
paused while the transport's buffer is full.  So a body counted in the
daemon's :class:`~vmservice.buffer_budget.BufferBudget` (a buffered exec's
answer) stays counted until it has really left, and a client that does not
read holds a reservation, never memory outside the budget.
:func:`write_within` does both for answers that may be large (directory
listings, background exec lists): their size held while they are written.
"""

from __future__ import annotations

from typing import Optional, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.web.iweb import IRequest
from twisted.web.server import Request
from zope.interface import implementer

from ..buffer_budget import BufferBudget

#: Bytes written at a time (the transport pauses us past its own 64 KiB buffer).
CHUNK = 64 * 1024


@implementer(IPushProducer)
class _PacedBody:
    """
    Writes ``body`` to ``request`` in chunks while the transport takes them.

    :ivar written: fires once every byte was handed to the transport (the
        producer unregistered).  Cancelling it stops the writing.  When the
        connection stops us (it is being lost) the writing stops and this
        waits on: the request's end follows at once, and Klein cancels the
        handler that waits (then the request is finished, so the cancel is
        quiet; failing here first would be logged as an error).
    """

    def __init__(self, request: Request, body: bytes) -> None:
        self._request = request
        self._body = memoryview(body)
        self._offset = 0
        self._paused = False
        self._writing = False
        self._stopped = False
        self.written: Deferred[None] = Deferred(lambda d: self._finish())
        request.registerProducer(self, True)

    def _finish(self) -> None:
        """Stop writing: release the body and unregister (the connection may be gone)."""
        self._stopped = True
        self._body = memoryview(b"")
        self._offset = 0
        if self._request.producer is self and self._request.channel is not None:
            self._request.unregisterProducer()

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        if self._writing or self._stopped:
            return  # re-entered from a write (the loop below goes on), or over
        self._writing = True
        try:
            while not self._paused and self._offset < len(self._body):
                chunk = self._body[self._offset:self._offset + CHUNK]
                self._offset += len(chunk)
                self._request.write(bytes(chunk))
        finally:
            self._writing = False
        if self._offset >= len(self._body) and not self._stopped:
            self._finish()
            self.written.callback(None)

    def stopProducing(self) -> None:
        self._finish()


async def write_within(request: IRequest, body: bytes, budget: Optional[BufferBudget], what: str) -> bytes:
    """
    Write ``body``, a whole answer whose status and headers are set, at the
    client's pace while its size is held in ``budget`` (``None``: no bound);
    return what the handler returns (nothing more).

    :param what: the answer, for a refusal's message ("a directory listing").
    :raises BufferBudgetExhausted: the budget has no room for it (nothing was written).
    """
    reservation = (budget or BufferBudget(None)).reservation(what)
    try:
        reservation.grow(len(body))
        await write_paced(cast(Request, request), body)
    finally:
        reservation.release()
    return b""


def write_paced(request: Request, body: bytes) -> Deferred[None]:
    """
    Write ``body`` as the whole of ``request``'s response (with its
    ``Content-Length``), at the client's pace; the Deferred fires once all
    of it was handed to the transport.  Set the status and headers first.
    """
    request.setHeader(b"Content-Length", b"%d" % len(body))
    paced = _PacedBody(request, body)
    paced.resumeProducing()
    return paced.written


__all__ = ["CHUNK", "write_paced", "write_within"]
