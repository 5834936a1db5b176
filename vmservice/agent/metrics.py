# -*- test-case-name: tests.agent.test_metrics -*-
"""
The host side of the metrics channel: one request, one answer, within a deadline.

The guest's metrics agent (:mod:`vmservice.guest.metrics`) serves the virtio-serial port ``metrics``,
which QEMU exposes on the node's ``stats.sock``.  :class:`MetricsClient` connects to that socket,
writes ``snapshot ID\\n`` and waits for the JSON line whose ``id`` is ``ID`` (a line with another id
was meant for an earlier connection and is skipped), then hangs up.  The whole exchange has a
deadline: a guest that is paused, booting, or whose metrics agent is dead or stuck costs at most that.

QEMU's server socket takes one connection at a time; a second one waits in its backlog until the
first hangs up, so the exchanges of one node are serialized by its deadline, never interleaved.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, TypeVar

from twisted.internet.defer import CancelledError, Deferred, DeferredLock
from twisted.internet.endpoints import UNIXClientEndpoint
from twisted.internet.interfaces import IReactorTime, IReactorUNIX
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

_T = TypeVar("_T")

#: Longest answer line accepted.
MAX_ANSWER = 64 * 1024


class MetricsUnavailable(Exception):
    """The metrics agent could not be reached or did not answer (in time)."""


def request_line(request_id: str) -> bytes:
    """The request for one snapshot."""
    return f"snapshot {request_id}\n".encode("ascii")


def parse_answer(line: bytes, request_id: str) -> dict[str, Any] | None:
    """
    The fields of the answer ``line`` (without its newline) to request ``request_id``, or ``None`` for
    an answer to another request.

    :raise MetricsUnavailable: the line is not a JSON object, or it reports an error.
    """
    try:
        answer = json.loads(line)
    except ValueError:
        raise MetricsUnavailable(f"the metrics agent answered something else than JSON: {line[:60]!r}") from None
    if not isinstance(answer, dict):
        raise MetricsUnavailable("the metrics agent answered something else than an object")
    if answer.get("id") != request_id:
        return None
    if "error" in answer:
        raise MetricsUnavailable(f"the metrics agent failed: {answer['error']}")
    del answer["id"]
    return answer


class _Exchange(Protocol):
    """One request and the wait for its answer."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.answer: Deferred[dict[str, Any]] = Deferred()
        self._buffer = b""

    def connectionMade(self) -> None:
        assert self.transport is not None
        if self.answer.called:
            # Connected after the deadline passed: hang up at once, or this connection would keep the
            # node's next exchanges waiting (QEMU serves one connection at a time).
            self.transport.loseConnection()
            return
        self.transport.write(request_line(self.request_id))

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        while b"\n" in self._buffer and not self.answer.called:
            line, self._buffer = self._buffer.split(b"\n", 1)
            try:
                fields = parse_answer(line, self.request_id)
            except MetricsUnavailable as error:
                self._finish(Failure(error))
                return
            if fields is not None:
                self._finish(fields)
                return
        if len(self._buffer) > MAX_ANSWER:
            self._finish(Failure(MetricsUnavailable("the metrics agent's answer is too long")))

    def _finish(self, result: dict[str, Any] | Failure) -> None:
        if not self.answer.called:
            self.answer.callback(result)
        assert self.transport is not None
        self.transport.loseConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if not self.answer.called:
            self.answer.errback(MetricsUnavailable("the metrics channel closed before an answer"))


class _Deadline:
    """A time limit over several waits in turn: when it passes, the wait under way is cancelled."""

    def __init__(self, clock: IReactorTime, seconds: float) -> None:
        self.seconds = seconds
        self._guarded: Deferred[Any] | None = None
        self._expired = False
        self._call = clock.callLater(seconds, self._expire)

    def guard(self, d: Deferred[_T]) -> Deferred[_T]:
        """Cancel ``d`` when the limit passes (at once if it has)."""
        self._guarded = d
        if self._expired:
            d.cancel()
        return d

    def _expire(self) -> None:
        self._expired = True
        if self._guarded is not None:
            self._guarded.cancel()

    def stop(self) -> None:
        """No more waits: drop the timer."""
        self._guarded = None
        if self._call.active():
            self._call.cancel()


class MetricsClient:
    """
    Asks the metrics agents of nodes for snapshots.

    :param reactor: connects the sockets and times the deadlines.
    """

    def __init__(self, reactor: IReactorUNIX) -> None:
        self._reactor = reactor
        self._ids = itertools.count(1)
        self._locks: dict[str, DeferredLock] = {}

    async def snapshot(self, socket: str, deadline: float) -> dict[str, Any]:
        """
        The fields of one snapshot of the guest behind ``socket``.

        Exchanges with one socket take turns (QEMU's server socket keeps a backlog of one: a third
        connection at once would be refused); the wait for a turn counts in ``deadline``.

        :raise MetricsUnavailable: no connection, no answer within ``deadline`` seconds, or a bad one.
        """
        clock: IReactorTime = self._reactor  # type: ignore[assignment]  # every reactor has both
        limit = _Deadline(clock, deadline)
        lock = self._locks.setdefault(socket, DeferredLock())
        try:
            try:
                await limit.guard(lock.acquire())
            except CancelledError:
                raise MetricsUnavailable(f"the metrics agent did not answer within {deadline:g} s") from None
            try:
                return await self._exchange(socket, limit)
            finally:
                lock.release()
        finally:
            limit.stop()
            self._forget(socket, lock)

    def _forget(self, socket: str, lock: DeferredLock) -> None:
        if not lock.locked and not lock.waiting and self._locks.get(socket) is lock:
            del self._locks[socket]

    async def _exchange(self, socket: str, limit: _Deadline) -> dict[str, Any]:
        """One connection, request and answer, within ``limit``."""
        deadline = limit.seconds
        exchange = _Exchange(str(next(self._ids)))
        limit.guard(exchange.answer)
        endpoint = UNIXClientEndpoint(self._reactor, socket, timeout=max(1, int(deadline)))
        connecting = endpoint.connect(_Factory(exchange))

        def stop_connecting(result: object) -> object:
            connecting.cancel()
            return result

        exchange.answer.addBoth(stop_connecting)
        connecting.addErrback(lambda failure: exchange.answer.errback(failure) if not exchange.answer.called else None)
        try:
            return await exchange.answer
        except CancelledError:
            raise MetricsUnavailable(f"the metrics agent did not answer within {deadline:g} s") from None
        except MetricsUnavailable:
            raise
        except Exception as error:
            raise MetricsUnavailable(f"cannot reach the metrics agent: {error}") from error
        finally:
            if exchange.transport is not None:
                exchange.transport.loseConnection()


class _Factory(Factory):
    """Hands the one :class:`_Exchange` to the connection."""

    noisy = False

    def __init__(self, exchange: _Exchange) -> None:
        self._exchange = exchange

    def buildProtocol(self, addr: object) -> _Exchange:
        return self._exchange


__all__ = ["MAX_ANSWER", "MetricsClient", "MetricsUnavailable", "parse_answer", "request_line"]
