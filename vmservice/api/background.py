# -*- test-case-name: tests.api.test_background -*-
"""
Background execs: ``POST /vm/{hostname}/exec?background=true`` starts one,
``/vm/{hostname}/exec/{exec_id}[/logs|/kill|/wait-exit]`` follow it.

Thin: each handler asks the node's guest
(:class:`~vmservice.guestport.background.IBackgroundExecs`) and words the answer;
a start goes through :class:`~vmservice.nodes.background_limit.BackgroundLimit`
(409 ``background_limit_reached`` past the node's bound).
The processes and their output rings live in the guest, so nothing here
keeps state between requests; a log reading is an NDJSON stream whose
back-pressure holds the guest's sending back (the ring goes on filling).
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from typing import Any, Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.web.server import Request
from zope.interface import implementer

from ..buffer_budget import BufferBudget
from ..errors import AgentError, BadRequest
from ..guestport.background import BackgroundInfo, BackgroundRequest, ILogSink, LogFrame
from ..guestport.exec import ExecRequest
from ..nodes.background_limit import BackgroundLimit
from ..nodes.fleet import Fleet
from .inputs.background import kill_request
from .models.background import BackgroundExec, BackgroundStarted, ExecDeleted, KillRequest, KillResponse, WaitExitResponse
from .models.meta import ErrorResponse
from .ndjson import NdjsonStream
from .paced_body import write_within
from .query import Boolean, Integer, NoQuery, param
from .rendering import json_body, rfc3339
from .routing import Reply, Route

#: ``ring_bytes`` of a background exec when the query gives none (1 MiB), and the largest (64 MiB).
DEFAULT_RING_BYTES = 1024 * 1024
MAX_RING_BYTES = 64 * 1024 * 1024
#: Seconds ``wait-exit`` waits when the query gives none, and at most.
DEFAULT_WAIT_SECONDS = 30
MAX_WAIT_SECONDS = 86400


def _time(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc)


def _optional_time(ns: Optional[int]) -> Optional[datetime]:
    return None if ns is None else _time(ns)


def exec_record(info: BackgroundInfo) -> BackgroundExec:
    """The API's record of a background exec."""
    return BackgroundExec(
        exec_id=info.exec_id, pid=info.pid, command=info.command, args=list(info.args), cwd=info.cwd,
        uid=info.uid, gid=info.gid, started_at=_time(info.started_ns), running=info.running,
        bytes_written=info.bytes_written, bytes_dropped=info.bytes_dropped, next_id=info.next_id,
        ring_bytes=info.ring_bytes, exit_code=info.exit_code, signal=info.signal,
        ended_at=_optional_time(info.ended_ns),
    )


def frame_record(frame: LogFrame, pid: int) -> dict[str, Any]:
    """
    One NDJSON line of a log: output as base64 in ``data`` and in the field
    named after its type; ``exit`` with its code; ``gap`` with what was missed.
    """
    record: dict[str, Any] = {"timestamp": rfc3339(_time(frame.time_ns)), "type": frame.kind, "pid": pid}
    if frame.kind == "gap":
        record.update(
            dropped_frames=frame.dropped_frames, dropped_bytes=frame.dropped_bytes,
            message=f"{frame.dropped_frames} frames ({frame.dropped_bytes} bytes) were dropped from the ring "
                    "before they were read",
        )
        return record
    record["id"] = frame.id
    if frame.kind == "exit":
        record.update(exit_code=frame.exit_code, ended_at=record["timestamp"])
        if frame.signal is not None:
            record["signal"] = frame.signal
        return record
    text = base64.b64encode(frame.data).decode("ascii")
    record.update({"encoding": "base64", "data": text, frame.kind: text})
    return record


@implementer(ILogSink)
class LogsCall:
    """
    One log reading in flight: :attr:`first` fires at the guest's head (or
    fails with its error), then records go to the attached stream.
    """

    def __init__(self) -> None:
        self.first: Deferred[BackgroundInfo] = Deferred()
        self.done: Deferred[None] = Deferred()
        self._pid = 0
        self._stream: Optional[NdjsonStream] = None
        self._pending: list[dict[str, Any]] = []

    def attach(self, stream: NdjsonStream) -> None:
        """Start writing records (the ones so far first)."""
        self._stream = stream
        pending, self._pending = self._pending, []
        for record in pending:
            stream.send(record)

    def _emit(self, record: dict[str, Any]) -> None:
        if self._stream is None:
            self._pending.append(record)
        else:
            self._stream.send(record)

    def opened(self, info: BackgroundInfo) -> None:
        self._pid = info.pid
        self.first.callback(info)

    def frame(self, frame: LogFrame) -> None:
        self._emit(frame_record(frame, self._pid))

    def ended(self) -> None:
        if not self.done.called:
            self.done.callback(None)

    def lost(self, error: AgentError) -> None:
        if not self.first.called:
            self.first.errback(error)
            return
        self._emit({"type": "error", "pid": self._pid, "error": f"the log stream was lost: {error}"})
        self.ended()


@frozen
class LogsQuery:
    """What part of a log to read."""

    from_id: int = param(Integer(0, 2**63 - 1), "First frame id to send; 0 = the oldest kept", default=0)
    follow: bool = param(Boolean(), "Keep sending new frames until the exec ends", default=False)


@frozen
class WaitExitQuery:
    """How long to wait."""

    timeout: int = param(Integer(0, MAX_WAIT_SECONDS), "Whole seconds to wait (default 30)",
                         default=DEFAULT_WAIT_SECONDS)


_COMMON = {
    400: Reply("Invalid hostname or exec id", ErrorResponse),
    404: Reply("No such node, or no such exec in it", ErrorResponse),
    409: Reply("The node is paused, stopped or suspended", ErrorResponse),
    503: Reply("The node's agent is not connected", ErrorResponse),
}


class BackgroundApi:
    """
    :param fleet: the nodes of this daemon.
    :param limit: the bound on each node's background execs (the default one when ``None``).
    :param budget: what a list's answer is held in while it is written; ``None``: no bound.
    """

    def __init__(self, fleet: Fleet, limit: Optional[BackgroundLimit] = None,
                 budget: Optional[BufferBudget] = None) -> None:
        self._fleet = fleet
        self._limit = limit if limit is not None else BackgroundLimit()
        self._budget = budget

    def routes(self) -> list[Route]:
        gone = {410: Reply("The exec was deleted", ErrorResponse)}
        return [
            Route("GET", "/vm/{hostname}/exec", self.listing, "List the node's background execs", "exec",
                  {200: Reply("Running execs and ended ones not deleted yet", BackgroundExec, array=True), **_COMMON}),
            Route("GET", "/vm/{hostname}/exec/{exec_id}", self.info, "Describe a background exec", "exec",
                  {200: Reply("The exec", BackgroundExec), **_COMMON, **gone}),
            Route("GET", "/vm/{hostname}/exec/{exec_id}/logs", self.logs, "Replay and follow a background exec's output",
                  "exec", {200: Reply("NDJSON log frames", media="application/x-ndjson"), **_COMMON, **gone},
                  query=LogsQuery, stream="logs"),
            Route("POST", "/vm/{hostname}/exec/{exec_id}/kill", self.kill, "Signal a background exec", "exec",
                  {200: Reply("What was sent", KillResponse), **_COMMON, **gone}, body=KillRequest),
            Route("GET", "/vm/{hostname}/exec/{exec_id}/wait-exit", self.wait_exit,
                  "Wait for a background exec to end", "exec",
                  {200: Reply("Ended, or still running when the timeout passed", WaitExitResponse), **_COMMON, **gone},
                  query=WaitExitQuery),
            Route("DELETE", "/vm/{hostname}/exec/{exec_id}", self.delete, "Forget an ended background exec", "exec",
                  {200: Reply("Deleted", ExecDeleted), **_COMMON,
                   409: Reply("The exec still runs (or the node is paused, stopped, suspended)", ErrorResponse),
                   **gone}),
        ]

    async def start(self, request: Request, exec_request: ExecRequest, ring_bytes: int, hostname: str) -> bytes:
        """``POST /vm/{hostname}/exec?background=true`` (routed by the exec handler)."""
        guest = await self._fleet.guest(hostname)
        info = await self._limit.start(hostname, guest.background, BackgroundRequest(exec_request, ring_bytes))
        started = BackgroundStarted(exec_id=info.exec_id, pid=info.pid, started_at=_time(info.started_ns),
                                    ring_bytes=info.ring_bytes)
        return json_body(request, started, 201)

    async def listing(self, request: Request, query: NoQuery, hostname: str) -> bytes:
        infos = await (await self._fleet.guest(hostname)).background.listing()
        answer = json_body(request, [exec_record(info) for info in infos])
        return await write_within(request, answer, self._budget, "a list of background execs")

    async def info(self, request: Request, query: NoQuery, hostname: str, exec_id: str) -> bytes:
        return json_body(request, exec_record(await (await self._fleet.guest(hostname)).background.info(exec_id)))

    async def kill(self, request: Request, query: NoQuery, hostname: str, exec_id: str) -> bytes:
        signal, grace_ms = kill_request(request)
        outcome = await (await self._fleet.guest(hostname)).background.kill(exec_id, signal, grace_ms)
        return json_body(request, KillResponse(outcome.exec_id, outcome.pid, outcome.running, outcome.signal_sent))

    async def wait_exit(self, request: Request, query: WaitExitQuery, hostname: str, exec_id: str) -> bytes:
        outcome = await (await self._fleet.guest(hostname)).background.wait(exec_id, query.timeout * 1000)
        return json_body(request, WaitExitResponse(
            exec_id=outcome.exec_id, running=outcome.running, timed_out=outcome.timed_out,
            exit_code=outcome.exit_code, signal=outcome.signal, ended_at=_optional_time(outcome.ended_ns),
        ))

    async def delete(self, request: Request, query: NoQuery, hostname: str, exec_id: str) -> bytes:
        await (await self._fleet.guest(hostname)).background.delete(exec_id)
        return json_body(request, ExecDeleted(exec_id=exec_id, reaped=True))

    async def logs(self, request: Request, query: LogsQuery, hostname: str, exec_id: str) -> bytes:
        call = LogsCall()
        guest = await self._fleet.guest(hostname)
        reader: IPushProducer = guest.background.logs(exec_id, query.from_id, query.follow, call)
        try:
            await call.first
            stream = NdjsonStream(request, reader)
            call.attach(stream)
            await call.done
            stream.close()
            return b""
        except BaseException:
            # The client went away (Klein cancels the handler), or the exec is unknown.
            reader.stopProducing()
            raise


def check_background(query: Any) -> None:
    """
    :raise BadRequest: ``background=true`` with ``stdin`` or ``buffered``
        (a background exec has no request body and no single answer).
    """
    if query.background and (query.stdin or query.buffered):
        raise BadRequest("background=true cannot be combined with stdin=true or buffered=true", code="invalid_query")


__all__ = [
    "BackgroundApi",
    "DEFAULT_RING_BYTES",
    "LogsCall",
    "LogsQuery",
    "MAX_RING_BYTES",
    "WaitExitQuery",
    "check_background",
    "exec_record",
    "frame_record",
]
