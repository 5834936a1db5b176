# -*- test-case-name: tests.e2b.test_processes -*-
"""
envd's ``process.Process`` service over :class:`~.processes.Processes`:
``Start`` and ``Connect`` stream a process's events (``Start`` from the
start, ``Connect`` from now on, its start event first), ``List`` shows the
running ones, ``SendInput``, ``CloseStdin``, ``SendSignal`` and ``Update``
act on one found by pid or tag (``not_found`` otherwise).  A stream whose
client goes away leaves its process running (its output then goes
nowhere); ``StreamInput`` (a client stream) is not served.
"""

from __future__ import annotations

from typing import Any, Mapping

from .data_plane import EnvdCall, MessageSink, RpcMethod
from .process_messages import process_input, pty_size, selector, signal_name, start_spec
from .processes import Process, Processes

#: The service's methods' prefix.
SERVICE = "process.Process"


class ProcessService:
    """The methods of envd's process service, over ``processes``."""

    def __init__(self, processes: Processes) -> None:
        self._processes = processes

    def _find(self, call: EnvdCall, message: Mapping[str, Any]) -> Process:
        return self._processes.table(call.sandbox.sandbox_id).find(selector(message))

    async def start(self, call: EnvdCall, message: dict[str, Any], sink: MessageSink) -> None:
        """``Start``: run a command, and stream its events until it ends."""
        table = self._processes.table(call.sandbox.sandbox_id)
        process, done = table.start(call.guest, start_spec(message), call.user, call.sandbox.env_vars, sink)
        try:
            await done
        finally:
            process.life.unsubscribe(sink)

    async def connect(self, call: EnvdCall, message: dict[str, Any], sink: MessageSink) -> None:
        """``Connect``: stream a running process's events from now on until it ends."""
        process = self._find(call, message)
        try:
            await process.life.subscribe(sink)
        finally:
            process.life.unsubscribe(sink)

    async def list(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """``List``: the running processes."""
        shown = []
        for process in self._processes.table(call.sandbox.sandbox_id).running():
            info: dict[str, Any] = {"config": process.config.to_json(), "pid": process.pid}
            if process.tag is not None:
                info["tag"] = process.tag
            shown.append(info)
        return {"processes": shown}

    async def send_input(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """``SendInput``: write to a process's stdin or terminal."""
        process = self._find(call, message)
        process.controls.write(*process_input(message.get("input")))
        return {}

    async def close_stdin(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """``CloseStdin``: end a process's stdin."""
        self._find(call, message).controls.close_stdin()
        return {}

    async def send_signal(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """
        ``SendSignal``: end a process.  Both signals end it the same way:
        the guest sends SIGTERM (a terminal SIGHUP), then SIGKILL to what
        is left; its streams get an end event for the signal sent.
        """
        process = self._find(call, message)
        process.life.kill(signal_name(message))
        return {}

    async def update(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """``Update``: resize a process's terminal."""
        process = self._find(call, message)
        if message.get("pty") is not None:
            process.controls.resize(*pty_size(message["pty"]))
        return {}

    def methods(self) -> dict[str, RpcMethod]:
        """The methods, by ``process.Process/Method``."""
        return {
            f"{SERVICE}/Start": RpcMethod(stream=self.start),
            f"{SERVICE}/Connect": RpcMethod(stream=self.connect),
            f"{SERVICE}/List": RpcMethod(unary=self.list),
            f"{SERVICE}/SendInput": RpcMethod(unary=self.send_input),
            f"{SERVICE}/CloseStdin": RpcMethod(unary=self.close_stdin),
            f"{SERVICE}/SendSignal": RpcMethod(unary=self.send_signal),
            f"{SERVICE}/Update": RpcMethod(unary=self.update),
        }


__all__ = ["ProcessService", "SERVICE"]
