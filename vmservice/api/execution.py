# -*- test-case-name: tests.api.test_execution -*-
"""
``POST /vm/{hostname}/exec``: run a command in the guest, streamed end to end.

The handler parses the query (:func:`vmservice.api.inputs.exec_params`), opens
an exec stream on the node's agent and waits for the guest's first record:
``rejected`` becomes a 400, ``started`` or ``error`` commit to a 200.  Then:

- streaming (default): one NDJSON record per guest record, written as it
  arrives; the response ends right after ``exit`` (or ``error``).  The HTTP
  transport's back-pressure pauses the agent stream (see
  :class:`~vmservice.api.streaming.NdjsonStream`).
- ``buffered=true``: one ExecResult object once the process has ended.

With ``stdin=true`` the request body (streamed, see
:mod:`vmservice.api.streaming`) is fed to the process while its output comes
back: full duplex.  A client that goes away kills the process group.
"""

from __future__ import annotations

import base64
import codecs
import re
from datetime import datetime, timezone
from typing import Any, Optional

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.iweb import IRequest

from ..agent.client import AgentUnavailable
from ..agent.execution import ExecProcess, ExecRejected, ExecRequest, start_exec
from ..errors import AgentNotConnected, BadRequest
from ..nodes.fleet import Fleet
from . import inputs
from .rendering import json_body, rfc3339
from .routing import Param, Reply, Route
from .streaming import NdjsonStream, RequestBody, request_body

log = Logger()

_EXEC_PATH = re.compile(rb"^/vm/[^/]+/exec/?$")


def streams_exec_body(method: bytes, path: bytes, query: dict[bytes, list[bytes]], headers: Headers) -> bool:
    """
    A :data:`~vmservice.api.streaming.BodyPredicate`: exec requests with
    ``stdin=true`` stream their body into the process.
    """
    if method != b"POST" or not _EXEC_PATH.match(path):
        return False
    values = query.get(b"stdin")
    return bool(values) and inputs.truthy(values[-1].decode("latin-1"))


def _time(seconds: float) -> str:
    return rfc3339(datetime.fromtimestamp(seconds, timezone.utc))


class _Text:
    """
    Renders output payloads: UTF-8 text (invalid bytes become U+FFFD; a
    character split across reads is kept whole) or base64 of the exact bytes.
    """

    def __init__(self, base64_mode: bool) -> None:
        self.base64_mode = base64_mode
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in ("stdout", "stderr")
        }

    def render(self, name: str, data: bytes, final: bool = False) -> str:
        if self.base64_mode:
            return base64.b64encode(data).decode("ascii")
        return str(self._decoders[name].decode(data, final))


class _Call:
    """
    One exec request in flight: an :class:`~vmservice.agent.execution.IExecSink`
    that first settles :attr:`first` (the guest's first record) and then
    streams or collects.
    """

    def __init__(self, clock: Any, base64_mode: bool, buffered: bool) -> None:
        self._clock = clock
        self._text = _Text(base64_mode)
        self._buffered = buffered
        self.first: Deferred[None] = Deferred()
        self.done: Deferred[None] = Deferred()
        self.pid: Optional[int] = None
        self.started_at: Optional[float] = None
        self.stream: Optional[NdjsonStream] = None
        self.chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self.result: dict[str, Any] = {}
        self._pending: list[dict[str, Any]] = []

    # -- records ----------------------------------------------------------------------

    def _now(self) -> float:
        return float(self._clock.seconds())

    def _record(self, kind: str, **fields: Any) -> dict[str, Any]:
        record: dict[str, Any] = {"timestamp": _time(self._now()), "type": kind}
        if self.pid is not None:
            record["pid"] = self.pid
        record.update({k: v for k, v in fields.items() if v is not None})
        return record

    def _emit(self, record: dict[str, Any]) -> None:
        if self._buffered:
            return
        if self.stream is None:
            self._pending.append(record)
        else:
            self.stream.send(record)

    def attach(self, stream: NdjsonStream) -> None:
        """Start writing records (the ones so far first)."""
        self.stream = stream
        pending, self._pending = self._pending, []
        for record in pending:
            stream.send(record)

    def _settle_first(self, error: Optional[BaseException] = None) -> None:
        if not self.first.called:
            if error is None:
                self.first.callback(None)
            else:
                self.first.errback(error)

    def _payload(self, name: str, data: bytes, final: bool = False) -> None:
        text = self._text.render(name, data, final)
        if text:
            self._emit(self._record(name, data=text, encoding="base64" if self._text.base64_mode else None))

    def _flush_text(self) -> None:
        if not self._text.base64_mode:
            for name in ("stdout", "stderr"):
                self._payload(name, b"", final=True)

    def _end(self, result: dict[str, Any]) -> None:
        self.result = result
        if not self.done.called:
            self.done.callback(None)

    # -- IExecSink ----------------------------------------------------------------------

    def started(self, pid: int) -> None:
        self.pid, self.started_at = pid, self._now()
        self._emit(self._record("started", started_at=_time(self.started_at)))
        self._settle_first()

    def output(self, name: str, data: bytes) -> None:
        if self._buffered:
            self.chunks[name].append(data)
        else:
            self._payload(name, data)

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        ended = _time(self._now())
        self._flush_text()
        self._emit(self._record("exit", exit_code=exit_code, signal=signal, ended_at=ended))
        self._end({"exit_code": exit_code, "signal": signal, "ended_at": ended})

    def failed(self, message: str, exit_code: int) -> None:
        now = _time(self._now())
        self._emit(self._record("error", error=message, exit_code=exit_code, ended_at=now))
        self._end({"exit_code": exit_code, "error": message, "ended_at": now})
        self._settle_first()

    def rejected(self, message: str) -> None:
        self._settle_first(BadRequest(message, code="invalid_exec"))
        self._end({})

    def lost(self, reason: Failure) -> None:
        if not self.first.called:
            error = reason.value
            if isinstance(error, (ConnectionDone, AgentUnavailable)) or "PEER_RESTARTED" in str(error):
                self._settle_first(AgentNotConnected(f"the agent lost the exec stream: {error}"))
            else:
                self._settle_first(AgentNotConnected(f"the agent failed the exec: {error}"))
            self._end({})
            return
        message = f"the agent lost the exec stream: {reason.getErrorMessage()}"
        now = _time(self._now())
        self._flush_text()
        self._emit(self._record("error", error=message, exit_code=255, ended_at=now))
        self._end({"exit_code": 255, "error": message, "ended_at": now})

    def buffered_result(self) -> dict[str, Any]:
        """The ExecResult object."""
        def text(name: str) -> str:
            data = b"".join(self.chunks[name])
            if self._text.base64_mode:
                return base64.b64encode(data).decode("ascii")
            return data.decode("utf-8", "replace")

        result: dict[str, Any] = {
            "stdout": text("stdout"),
            "stderr": text("stderr"),
            "pid": self.pid,
            "started_at": _time(self.started_at) if self.started_at is not None else None,
            "ended_at": self.result.get("ended_at"),
            "signal": self.result.get("signal"),
            "exit_code": self.result.get("exit_code", 0),
            "error": self.result.get("error"),
        }
        if self._text.base64_mode:
            result["encoding"] = "base64"
        return {k: v for k, v in result.items() if v is not None}


class ExecApi:
    """
    :param fleet: the nodes of this daemon.
    :param clock: an ``IReactorTime`` for the records' times.
    """

    def __init__(self, fleet: Fleet, clock: Any) -> None:
        self._fleet = fleet
        self._clock = clock

    def routes(self) -> list[Route]:
        return [
            Route(
                "POST", "/vm/{hostname}/exec", self.exec, "Run a command in the node", "exec",
                {200: Reply("NDJSON ExecStreamRecords, or one ExecResult when buffered", media="application/x-ndjson"),
                 400: Reply("Bad input (no cmd, bad uid/gid/env/permissions/booleans, unknown cwd)"),
                 404: Reply("No such node"),
                 503: Reply("The node's agent is not connected")},
                query=(
                    Param("cmd", "Command line for the shell (or the program when shell is empty)", required=True),
                    Param("args", "Extra argument; appended as one quoted word", repeated=True),
                    Param("env", "KEY=VALUE for the environment", repeated=True),
                    Param("uid", "User id (default 0; 4294967295 = not set)", kind="integer"),
                    Param("gid", "Group id (default 0; 4294967295 = not set)", kind="integer"),
                    Param("cwd", "Working directory: absolute, ~, ~/dir or relative to the user's home"),
                    Param("shell", "Shell (default /bin/bash, run as SHELL -c); empty runs cmd directly"),
                    Param("permissions", "The process's umask, octal (e.g. 0022)"),
                    Param("stdin", "Stream the request body into stdin", kind="boolean"),
                    Param("stdout", "Return stdout (default true)", kind="boolean"),
                    Param("stderr", "Return stderr (default true)", kind="boolean"),
                    Param("stdio", "Payload encoding", enum=("text", "base64")),
                    Param("buffered", "One ExecResult instead of a stream", kind="boolean"),
                ),
            ),
        ]

    async def exec(self, request: IRequest, hostname: str) -> bytes:
        params = inputs.exec_params(request)
        exec_request: ExecRequest = params.request
        body: Optional[RequestBody] = request_body(request) if exec_request.stdin else None
        try:
            agent = self._fleet.agent(hostname)
        except BaseException:
            if body is not None:
                body.stopProducing()
            raise
        call = _Call(self._clock, params.base64, params.buffered)
        try:
            process = start_exec(agent, exec_request, call)
        except AgentUnavailable as error:
            if body is not None:
                body.stopProducing()
            raise AgentNotConnected(str(error)) from None
        uploading: Optional[Deferred[int]] = None
        try:
            if body is not None:
                uploading = self._feed_stdin(body, process)
            await call.first
            if params.buffered:
                await call.done
                return json_body(request, call.buffered_result())
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
            if uploading is not None and not uploading.called:
                uploading.cancel()

    def _feed_stdin(self, body: RequestBody, process: ExecProcess) -> Deferred[int]:
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


__all__ = ["ExecApi", "streams_exec_body"]
