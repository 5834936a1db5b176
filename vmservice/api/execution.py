# -*- test-case-name: tests.api.test_execution -*-
"""
``POST /vm/{hostname}/exec``: run a command in the guest, streamed end to end.

The handler opens an exec on the node's guest (:meth:`~vmservice.guestport.guest.IGuest.exec`)
and waits for the guest's first event: a refusal becomes a 400, a lost agent
a 503, a start (or a failure to start) commits to a 200.  Then
(:mod:`.exec_records`):

- streaming (default): one NDJSON record per guest event, written as it
  arrives; the response ends right after ``exit`` (or ``error``).  The HTTP
  transport's back-pressure pauses the guest's output (see
  :class:`~.ndjson.NdjsonStream`).
- ``buffered=true``: one ExecResult object once the process has ended,
  within the daemon's buffer budget (503 ``buffer_budget_exhausted`` when it
  has no room, the process stopped), written at the client's pace
  (:mod:`.paced_body`) and counted until it was.

With ``stdin=true`` the request body (streamed, see :mod:`.streaming`) is
fed to the process while its output comes back: full duplex.  A client that
goes away kills the process group.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.server import Request

from ..buffer_budget import BufferBudget
from ..guestport.exec import ExecRequest, IExecProcess
from ..nodes.fleet import Fleet
from .background import DEFAULT_RING_BYTES, MAX_RING_BYTES, BackgroundApi, check_background
from .exec_records import BUFFERED_LIMIT, ExecCall
from .models.background import BackgroundStarted
from .models.meta import ErrorResponse
from .ndjson import NdjsonStream
from .paced_body import write_paced
from .query import UMASK, Boolean, Choice, Integer, Text, UserId, param
from .rendering import json_body
from .request_body import RequestBody
from .routing import Reply, Route
from .streaming import request_body


@frozen
class ExecQuery:
    """The query of an exec (see docs/api.md)."""

    cmd: str = param(Text(1), "Command line for the shell (or the program when shell is empty)", required=True)
    args: tuple[str, ...] = param(Text(), "Extra argument; appended as one quoted word", repeated=True)
    env: tuple[str, ...] = param(Text(2, r"[^=]+=[\s\S]*", "KEY=VALUE"), "KEY=VALUE for the environment", repeated=True)
    uid: Optional[int] = param(UserId(), "User id (default 0; 4294967295 = not set)")
    gid: Optional[int] = param(UserId(), "Group id (default 0; 4294967295 = not set)")
    cwd: str = param(Text(), "Working directory: absolute, ~, ~/dir or relative to the user's home", default="")
    shell: Optional[str] = param(Text(), "Shell (default /bin/bash, run as SHELL -c); empty runs cmd directly")
    permissions: Optional[int] = param(UMASK, "The process's umask, octal (e.g. 0022)")
    stdin: bool = param(Boolean(), "Stream the request body into stdin", default=False)
    stdout: bool = param(Boolean(), "Return stdout (default true)", default=True)
    stderr: bool = param(Boolean(), "Return stderr (default true)", default=True)
    stdio: str = param(Choice(("text", "base64")), "Payload encoding", default="text")
    buffered: bool = param(
        Boolean(), f"One ExecResult instead of a stream (at most {BUFFERED_LIMIT >> 20} MiB of each output)",
        default=False,
    )
    background: bool = param(
        Boolean(), "Start it in the background: 201 with its exec_id; its output is kept in the guest", default=False,
    )
    ring_bytes: int = param(
        Integer(1, MAX_RING_BYTES), "Background: most output bytes kept in the guest (default 1 MiB)",
        default=DEFAULT_RING_BYTES,
    )

    def request(self) -> ExecRequest:
        """What to run in the guest."""
        return ExecRequest(
            cmd=self.cmd,
            args=self.args,
            env=self.env,
            uid=self.uid or 0,
            gid=self.gid or 0,
            cwd=self.cwd,
            shell="/bin/bash" if self.shell is None else self.shell,
            umask=self.permissions,
            stdin=self.stdin,
            stdout=self.stdout,
            stderr=self.stderr,
        )


class ExecApi:
    """
    :param fleet: the nodes of this daemon.
    :param clock: for the records' times.
    :param budget: what buffered execs reserve their output and answer from;
        ``None``: no bound.
    """

    def __init__(self, fleet: Fleet, clock: IReactorTime, background: BackgroundApi,
                 budget: Optional[BufferBudget] = None) -> None:
        self._fleet = fleet
        self._clock = clock
        self._background = background
        self._budget = budget

    def routes(self) -> list[Route]:
        return [
            Route(
                "POST", "/vm/{hostname}/exec", self.exec, "Run a command in the node", "exec",
                {200: Reply("NDJSON ExecStreamRecords, or one ExecResult (JSON) when buffered",
                            media="application/x-ndjson", also=("application/json",)),
                 201: Reply("background=true: the exec started", BackgroundStarted),
                 400: Reply("Bad input (no cmd, bad uid/gid/env/permissions/booleans, unknown cwd)", ErrorResponse),
                 404: Reply("No such node", ErrorResponse),
                 409: Reply("The node is paused, stopped or suspended; background=true: the node keeps as many "
                            "background execs as it may", ErrorResponse),
                 503: Reply("The node's agent is not connected; buffered=true: the daemon's buffer budget has no "
                            "room for the output (the process was stopped)", ErrorResponse)},
                query=ExecQuery,
                stream_body="stdin",
                stream="exec",
            ),
        ]

    async def exec(self, request: Request, query: ExecQuery, hostname: str) -> bytes:
        check_background(query)
        if query.background:
            return await self._background.start(request, query.request(), query.ring_bytes, hostname)
        body: Optional[RequestBody] = request_body(request) if query.stdin else None
        call = ExecCall(self._clock, query.stdio == "base64", query.buffered, budget=self._budget)
        try:
            process = (await self._fleet.guest(hostname)).exec(query.request(), call)
        except BaseException:
            call.release()
            if body is not None:
                body.stopProducing()
            raise
        call.process = process
        uploading: Optional[Deferred[int]] = None
        try:
            if body is not None:
                uploading = self._feed_stdin(body, process)
            await call.first
            if query.buffered:
                await call.done
                answer = json_body(request, call.buffered_result())
                call.settle(len(answer))
                await write_paced(request, answer)
                return b""
            stream = NdjsonStream(request, process)
            call.attach(stream)
            await call.done
            stream.close()
            return b""
        except CancelledError:
            # The client went away (Klein cancels the handler): kill the process.
            process.kill()
            raise
        except BaseException:
            process.kill()
            if body is not None:
                body.stopProducing()
            raise
        finally:
            call.release()
            if uploading is not None and not uploading.called:
                uploading.cancel()

    def _feed_stdin(self, body: RequestBody, process: IExecProcess) -> Deferred[int]:
        """Stream ``body`` into the process's stdin, with back-pressure; EOF at its end."""
        process.register_stdin_producer(body)
        delivered = body.deliver_to(process.write_stdin)

        def ended(length: int) -> int:
            process.unregister_stdin_producer()
            process.close_stdin()
            return length

        def lost(failure: Failure) -> None:
            failure.trap(CancelledError, Exception)
            return None

        delivered.addCallback(ended)
        delivered.addErrback(lost)
        return delivered


__all__ = ["ExecApi", "ExecQuery"]
