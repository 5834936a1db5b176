# -*- test-case-name: tests.guest.test_background,tests.integration.guest.test_background -*-
"""
The ``background`` operation's streams: each request's ``action`` (see
:mod:`vmservice.guest.background`) served against the agent's
:class:`~vmservice.guest.background.Registry`: the JSON replies, a wait, and the
logs a reader replays and follows at its own pace.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping, Optional

from vmservice.guest.background import LOGS_HIGH_WATER, BackgroundError, BackgroundExec, read_header, registry_of
from vmservice.guest.loop import Timer
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.wire.logframes import EXIT, encode_frame, gap_frame
from vmservice.wire.openheaders.background import (ACTIONS, EXEC_REQUESTS, BackgroundKillHeader, BackgroundListHeader,
                                                   BackgroundLogsHeader, BackgroundWaitHeader)
from vmservice.wire.payloads import encode_head


class BackgroundHandler(StreamHandler):
    """
    Serves ``{"op": "background", "action": ...}`` (see :mod:`vmservice.guest.background`),
    each action's header read as its record (:mod:`vmservice.wire.openheaders.background`)
    once the exec it names was found.
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._entry: Optional[BackgroundExec] = None
        self._timer: Optional[Timer] = None
        self._cursor = 0
        self._offset: Optional[int] = None
        self._follow = False
        self._done = False
        self._pumping = False

    def start(self) -> None:
        action = self.header.get("action")
        try:
            if action not in ACTIONS:
                raise BackgroundError("invalid", f"unknown action {action!r}")
            registry = registry_of(self.stream.loop)
            if action == "start":
                self._reply(registry.start(self.header).info())
            elif action == "list":
                read_header(BackgroundListHeader.from_json, self.header)
                self._reply([entry.info() for entry in registry.execs.values()])
            else:
                entry = registry.get(self.header.get("exec_id"))
                request = read_header(EXEC_REQUESTS[action].from_json, self.header)
                if isinstance(request, BackgroundKillHeader):
                    self._kill(entry, request)
                elif isinstance(request, BackgroundWaitHeader):
                    self._wait(entry, request.timeout_ms)
                elif isinstance(request, BackgroundLogsHeader):
                    self._logs(entry, request)
                elif action == "delete":
                    registry.delete(entry.exec_id)
                    self._reply({"exec_id": entry.exec_id, "reaped": True})
                else:
                    self._reply(entry.info())
        except BackgroundError as e:
            reply = {"ok": False, "error": e.kind, "message": e.message}
            if action == "logs":
                self.stream.write(encode_head(reply))
            else:
                self.stream.write(json.dumps(reply).encode())
            self.stream.end()

    def _reply(self, result: Any) -> None:
        self.stream.write(json.dumps({"ok": True, "result": result}, separators=(",", ":")).encode())
        self.stream.end()

    def _kill(self, entry: BackgroundExec, request: BackgroundKillHeader) -> None:
        sent = entry.kill(request.signal, request.grace_ms)
        self._reply({"exec_id": entry.exec_id, "pid": entry.pid, "running": entry.running, "signal_sent": sent})

    # -- wait ---------------------------------------------------------------------------

    def _wait(self, entry: BackgroundExec, timeout_ms: int) -> None:
        self._entry = entry
        if entry.running and timeout_ms > 0:
            entry.listen(self._wait_check)
            self._timer = self.stream.loop.call_later(timeout_ms / 1000.0, self._wait_over)
            return
        self._wait_over()

    def _wait_check(self) -> None:
        if self._entry is not None and not self._entry.running:
            self._wait_over()

    def _wait_over(self) -> None:
        entry = self._entry
        if entry is None or self._done:
            return
        self._done = True
        entry.unlisten(self._wait_check)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._reply({
            "exec_id": entry.exec_id, "running": entry.running, "exit_code": entry.exit_code,
            "signal": entry.signal, "ended_ns": entry.ended_ns, "timed_out": entry.running,
        })

    # -- logs ---------------------------------------------------------------------------

    def _logs(self, entry: BackgroundExec, request: BackgroundLogsHeader) -> None:
        from_id = request.from_id
        self._entry, self._follow = entry, request.follow
        ring = entry.ring
        self._cursor = from_id or ring.first_id
        if from_id == 1 or from_id == 0:
            self._offset = 0 if from_id == 1 else ring.first_offset
        self.stream.write(encode_head({"ok": True, "result": entry.info()}))
        entry.listen(self._pump)
        self._pump()

    def _pump(self) -> None:
        entry = self._entry
        if entry is None or self._done or self._pumping:
            # Writing may call back (flushed, a new frame): the loop below goes on from where it is.
            return
        self._pumping = True
        try:
            self._send_frames(entry)
        finally:
            self._pumping = False

    def _send_frames(self, entry: BackgroundExec) -> None:
        ring = entry.ring
        stream = self.stream
        while not self._done and stream.pending < LOGS_HIGH_WATER and self._cursor < ring.next_id:
            if self._cursor < ring.first_id:
                # Evicted before this reader got to it: say how much, once, when it can take more.
                missed = ring.first_id - self._cursor
                dropped = ring.first_offset - (self._offset if self._offset is not None else 0)
                self._cursor, self._offset = ring.first_id, ring.first_offset
                stream.write(encode_frame(gap_frame(time.time_ns(), missed, max(dropped, 0))))
                continue
            frame, offset = ring.get(self._cursor)
            self._cursor += 1
            self._offset = offset + len(frame.payload)
            stream.write(encode_frame(frame))
            if frame.kind == EXIT:
                self._finish()
                return
        if not self._done and self._cursor >= ring.next_id and (not self._follow or not entry.running):
            self._finish()

    def _finish(self) -> None:
        self._done = True
        if self._entry is not None:
            self._entry.unlisten(self._pump)
        self.stream.end()

    def flushed(self) -> None:
        if self._entry is not None and not self._done and self.header.get("action") == "logs":
            self._pump()

    def reset(self, code: int, reason: str) -> None:
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._entry is not None:
            self._entry.unlisten(self._pump)
            self._entry.unlisten(self._wait_check)


__all__ = ["BackgroundHandler"]
