# -*- test-case-name: tests.api.test_execution -*-
"""
What an exec sends back: the guest's events as NDJSON stream records, or
collected into one ExecResult (``buffered=true``).

:class:`ExecCall` is the :class:`~vmservice.guestport.exec.IExecSink` of one exec
request.  It first settles :attr:`ExecCall.first` (the guest's first event: a
start commits the response to 200; a refusal or a lost agent is an error
status), then streams records to an :class:`~.ndjson.NdjsonStream` or collects
the output.  A buffered exec collects at most :data:`BUFFERED_LIMIT` bytes per
stream: past it the process is stopped and the result says so in ``error``.

A buffered exec also holds a reservation of the daemon's
:class:`~vmservice.buffer_budget.BufferBudget`, grown by the size each piece of
output takes in the JSON answer (:class:`_Rendered`: base64, or text whose
invalid bytes become six-byte ``\\ufffd`` escapes).  When the budget has no
room the exec fails: the process is stopped, what was collected is dropped,
and :attr:`ExecCall.done` fails with
:class:`~vmservice.errors.BufferBudgetExhausted` (503).  The handler settles
the reservation at the rendered answer's size and releases it once the answer
was written, or on any other way out (:meth:`ExecCall.release`).
"""

from __future__ import annotations

import base64
import codecs
import json
from datetime import datetime, timezone
from typing import Any, Optional

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from ..buffer_budget import BufferBudget, Reservation
from ..errors import AgentError, BufferBudgetExhausted
from ..guestport.exec import IExecProcess, IExecSink
from .ndjson import NdjsonStream
from .rendering import rfc3339

#: Most bytes a buffered exec keeps of each of stdout and stderr (16 MiB).
BUFFERED_LIMIT = 16 * 1024 * 1024

#: The exit code of an exec the daemon had to give up on (agent lost, output
#: past the buffered limit): like a shell's "killed" status, never the
#: program's own.
LOST_EXIT_CODE = 255


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


class _Rendered:
    """
    How many bytes a buffered stream's output takes in the JSON answer,
    piece by piece: base64 of all of it, or its text (decoded as
    :meth:`ExecCall.buffered_result` does) escaped as ``json.dumps`` does.
    """

    def __init__(self, base64_mode: bool) -> None:
        self._base64_mode = base64_mode
        self._raw = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def grow(self, data: bytes) -> int:
        """The bytes ``data`` adds to the answer."""
        if self._base64_mode:
            before, self._raw = self._raw, self._raw + len(data)
            return 4 * (-(-self._raw // 3) - -(-before // 3))
        return len(json.dumps(self._decoder.decode(data))) - 2


@implementer(IExecSink)
class ExecCall:
    """
    One exec request in flight.

    :param clock: for the records' times.
    :param base64_mode: payloads as base64 of the exact bytes.
    :param buffered: collect everything into one result.
    :param limit: most bytes collected per stream when buffered.
    :param budget: what a buffered exec's output and answer reserve from;
        ``None``: no bound.
    :ivar first: fires at the guest's first event; fails with the
        :class:`~vmservice.errors.AgentError` of an exec that never started.
    :ivar done: fires once the exec ended (whatever way); fails with
        :class:`~vmservice.errors.BufferBudgetExhausted` when the budget had
        no room for its output.
    """

    def __init__(self, clock: IReactorTime, base64_mode: bool, buffered: bool, limit: int = BUFFERED_LIMIT,
                 budget: Optional[BufferBudget] = None) -> None:
        self._clock = clock
        self._text = _Text(base64_mode)
        self._buffered = buffered
        self._limit = limit
        self._reservation: Reservation = (budget or BufferBudget(None)).reservation("a buffered exec's output")
        self._rendered = {name: _Rendered(base64_mode) for name in ("stdout", "stderr")}
        self._refused = False
        self.first: Deferred[None] = Deferred()
        self.done: Deferred[None] = Deferred()
        self.pid: Optional[int] = None
        self.started_at: Optional[float] = None
        self.process: Optional[IExecProcess] = None
        self._stream: Optional[NdjsonStream] = None
        self._chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self._sizes = {"stdout": 0, "stderr": 0}
        self._overflow: Optional[str] = None
        self._result: dict[str, Any] = {}
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
        if self._stream is None:
            self._pending.append(record)
        else:
            self._stream.send(record)

    def attach(self, stream: NdjsonStream) -> None:
        """Start writing records (the ones so far first)."""
        self._stream = stream
        pending, self._pending = self._pending, []
        for record in pending:
            stream.send(record)

    def _settle_first(self, error: Optional[AgentError] = None) -> None:
        if not self.first.called:
            if error is None:
                self.first.callback(None)
            else:
                self.first.errback(error)

    def _payload(self, name: str, data: bytes, final: bool = False) -> None:
        text = self._text.render(name, data, final)
        if text:
            # The payload in ``data`` and in the field named after the type: clients read one or the other.
            fields = {"data": text, name: text, "encoding": "base64" if self._text.base64_mode else None}
            self._emit(self._record(name, **fields))

    def _flush_text(self) -> None:
        if not self._text.base64_mode:
            for name in ("stdout", "stderr"):
                self._payload(name, b"", final=True)

    def _end(self, result: dict[str, Any]) -> None:
        self._result = result
        if not self.done.called:
            self.done.callback(None)

    # -- IExecSink ----------------------------------------------------------------------

    def started(self, pid: int) -> None:
        self.pid, self.started_at = pid, self._now()
        self._emit(self._record("started", started_at=_time(self.started_at)))
        self._settle_first()

    def output(self, name: str, data: bytes) -> None:
        if not self._buffered:
            self._payload(name, data)
            return
        if self._overflow is not None or self._refused or self._reservation.released:
            return
        room = self._limit - self._sizes[name]
        kept = data[:room]
        try:
            self._reservation.grow(self._rendered[name].grow(kept))
        except BufferBudgetExhausted as error:
            self._refuse(error)
            return
        self._chunks[name].append(kept)
        self._sizes[name] += min(len(data), room)
        if len(data) > room:
            self._overflow = name
            if self.process is not None:
                self.process.kill()

    def _refuse(self, error: BufferBudgetExhausted) -> None:
        """The budget has no room: drop the output, stop the process, fail :attr:`done`."""
        self._refused = True
        self.release()
        if not self.done.called:
            self.done.errback(error)
        if self.process is not None:
            self.process.kill()  # its stream may end at once: done has its outcome already

    def settle(self, size: int) -> None:
        """
        The answer is rendered (``size`` bytes): drop the collected output and
        hold the answer's size until :meth:`release`.
        """
        self._chunks = {"stdout": [], "stderr": []}
        self._reservation.settle(size)

    def release(self) -> None:
        """Give the budget back (once the answer was written, or on any other way out); output after it is dropped."""
        self._chunks = {"stdout": [], "stderr": []}
        self._reservation.release()

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

    def lost(self, error: AgentError) -> None:
        if not self.first.called:
            self._settle_first(error)
            self._end({})
            return
        if self._overflow is not None:
            message = (
                f"{self._overflow} passed the {self._limit} byte limit of a buffered exec: the process was "
                "stopped (the streamed exec has no limit)"
            )
        else:
            message = f"the agent lost the exec stream: {error}"
        now = _time(self._now())
        self._flush_text()
        self._emit(self._record("error", error=message, exit_code=LOST_EXIT_CODE, ended_at=now))
        self._end({"exit_code": LOST_EXIT_CODE, "error": message, "ended_at": now})

    def buffered_result(self) -> dict[str, Any]:
        """The ExecResult object."""

        def text(name: str) -> str:
            data = b"".join(self._chunks[name])
            if self._text.base64_mode:
                return base64.b64encode(data).decode("ascii")
            return data.decode("utf-8", "replace")

        result: dict[str, Any] = {
            "stdout": text("stdout"),
            "stderr": text("stderr"),
            "pid": self.pid,
            "started_at": _time(self.started_at) if self.started_at is not None else None,
            "ended_at": self._result.get("ended_at"),
            "signal": self._result.get("signal"),
            "exit_code": self._result.get("exit_code", 0),
            "error": self._result.get("error"),
        }
        if self._text.base64_mode:
            result["encoding"] = "base64"
        return {k: v for k, v in result.items() if v is not None}


__all__ = ["BUFFERED_LIMIT", "ExecCall", "LOST_EXIT_CODE"]
