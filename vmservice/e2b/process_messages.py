# -*- test-case-name: tests.e2b.test_process_messages -*-
"""
The messages of envd's ``process.Process`` service in protobuf's JSON form,
read and written without the service: a process's configuration, its
selector, a signal, a terminal size and an input read from a client (each
bounded, anything else ``invalid_argument``), and the events a process's
streams carry (start, data, keepalive, end), defaults omitted as protobuf's
JSON omits them.
"""

from __future__ import annotations

import binascii
from base64 import b64decode, b64encode
from typing import Any, Mapping, Optional

from attrs import frozen

from .connect import Code, ConnectError

#: Most arguments, and most environment entries, of one command.
MAX_WORDS = 1024
#: Most characters of one word (the command, an argument, a name or value, the cwd, a tag).
MAX_TEXT = 64 * 1024
#: Most bytes of one input.
MAX_INPUT = 1024 * 1024
#: Most columns or rows of a terminal.
MAX_SIZE = 0xFFFF
#: The signals a client may send, by their names and numbers in the protocol.
SIGNALS: dict[object, str] = {"SIGNAL_SIGTERM": "SIGTERM", "SIGNAL_SIGKILL": "SIGKILL", 15: "SIGTERM",
                              9: "SIGKILL"}
#: How Go words a process killed by a signal (envd's ``status``), by the signal's name.
SIGNAL_WORDS: dict[str, str] = {
    "SIGHUP": "hangup", "SIGINT": "interrupt", "SIGQUIT": "quit", "SIGILL": "illegal instruction",
    "SIGTRAP": "trace/breakpoint trap", "SIGABRT": "aborted", "SIGBUS": "bus error",
    "SIGFPE": "floating point exception", "SIGKILL": "killed", "SIGUSR1": "user defined signal 1",
    "SIGSEGV": "segmentation fault", "SIGUSR2": "user defined signal 2", "SIGPIPE": "broken pipe",
    "SIGALRM": "alarm clock", "SIGTERM": "terminated",
}


@frozen
class ProcessConfig:
    """
    A command as a client asked for it (``ProcessConfig``).

    :ivar cmd: the program.
    :ivar args: its arguments.
    :ivar envs: its own environment entries, by name.
    :ivar cwd: its working directory, ``None`` for the user's home.
    """

    cmd: str
    args: tuple[str, ...] = ()
    envs: tuple[tuple[str, str], ...] = ()
    cwd: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        """The configuration as ``List`` shows it."""
        shown: dict[str, Any] = {"cmd": self.cmd, "args": list(self.args), "envs": dict(self.envs)}
        if self.cwd is not None:
            shown["cwd"] = self.cwd
        return shown


@frozen
class StartSpec:
    """
    A ``StartRequest``: the command, its terminal's size (``None``: no
    terminal, pipes), its tag, and whether its stdin is a pipe the client
    writes to (envd's default: yes).
    """

    config: ProcessConfig
    pty: Optional[tuple[int, int]] = None
    tag: Optional[str] = None
    stdin: bool = True


@frozen
class Selector:
    """A ``ProcessSelector``: exactly one of a pid and a tag."""

    pid: Optional[int] = None
    tag: Optional[str] = None


def _invalid(message: str) -> ConnectError:
    return ConnectError(Code.INVALID_ARGUMENT, message)


def _object(value: object, name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid(f"{name} must be an object")
    return value


def _text(value: object, name: str, empty: bool = True) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT or "\0" in value or (not empty and not value):
        raise _invalid(f"{name} must be a string of at most {MAX_TEXT} characters without NUL"
                       + ("" if empty else ", not empty"))
    return value


def _number(value: object, name: str, limit: int) -> int:
    if isinstance(value, str) and value.isdigit() and len(value) <= 10:
        value = int(value)
    if type(value) is not int or not 0 <= value <= limit:
        raise _invalid(f"{name} must be a number 0 .. {limit}")
    return value


def process_config(value: object) -> ProcessConfig:
    """Read a ``ProcessConfig``."""
    config = _object(value, "process")
    args = config.get("args") or []
    envs = _object(config.get("envs"), "process.envs")
    if not isinstance(args, list) or len(args) > MAX_WORDS or len(envs) > MAX_WORDS:
        raise _invalid(f"process.args and process.envs must hold at most {MAX_WORDS} entries")
    for name in envs:
        if not name or "=" in name:
            raise _invalid("an environment variable's name must be non-empty, without '='")
    cwd = config.get("cwd")
    return ProcessConfig(
        _text(config.get("cmd"), "process.cmd", empty=False),
        tuple(_text(arg, "an argument") for arg in args),
        tuple((_text(name, "a name"), _text(envs[name], "a value")) for name in envs),
        None if cwd is None else _text(cwd, "process.cwd"))


def pty_size(value: object) -> tuple[int, int]:
    """Read a ``PTY``: its size's columns and rows."""
    size = _object(_object(value, "pty").get("size"), "pty.size")
    return _number(size.get("cols", 0), "pty.size.cols", MAX_SIZE), _number(size.get("rows", 0), "pty.size.rows",
                                                                             MAX_SIZE)


def start_spec(message: Mapping[str, Any]) -> StartSpec:
    """Read a ``StartRequest``."""
    stdin, tag, pty = message.get("stdin"), message.get("tag"), message.get("pty")
    if stdin is not None and not isinstance(stdin, bool):
        raise _invalid("stdin must be true or false")
    return StartSpec(process_config(message.get("process")), None if pty is None else pty_size(pty),
                     None if tag is None else _text(tag, "tag"), stdin is not False)


def selector(message: Mapping[str, Any]) -> Selector:
    """Read the ``ProcessSelector`` of a request (its ``process``)."""
    chosen = _object(message.get("process"), "process")
    if "pid" in chosen:
        return Selector(pid=_number(chosen["pid"], "process.pid", 2**32 - 1))
    if "tag" in chosen:
        return Selector(tag=_text(chosen["tag"], "process.tag"))
    raise _invalid("process must name a pid or a tag")


def signal_name(message: Mapping[str, Any]) -> str:
    """The signal a ``SendSignalRequest`` sends (``SIGTERM`` or ``SIGKILL``)."""
    value = message.get("signal")
    try:
        return SIGNALS[value]
    except (KeyError, TypeError):
        raise _invalid("signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL") from None


def process_input(value: object) -> tuple[str, bytes]:
    """Read a ``ProcessInput``: where it goes (``stdin`` or ``pty``) and its bytes."""
    given = _object(value, "input")
    for name in ("stdin", "pty"):
        if name in given:
            data = given[name]
            if not isinstance(data, str) or len(data) > MAX_INPUT * 4 // 3 + 4:
                raise _invalid(f"input.{name} must be base64 of at most {MAX_INPUT} bytes")
            try:
                return name, b64decode(data.replace("-", "+").replace("_", "/") + "=" * (-len(data) % 4),
                                       validate=True)
            except binascii.Error:
                raise _invalid(f"input.{name} is not base64") from None
    raise _invalid("input must hold stdin or pty")


def start_event(pid: int) -> dict[str, Any]:
    """The event that says a process runs."""
    return {"event": {"start": {"pid": pid}}}


def data_event(name: str, data: bytes) -> dict[str, Any]:
    """The event of output ``data`` on ``name`` (``stdout``, ``stderr`` or ``pty``)."""
    return {"event": {"data": {name: b64encode(data).decode("ascii")}}}


def keepalive_event() -> dict[str, Any]:
    """The event a stream sends while nothing else happens."""
    return {"event": {"keepalive": {}}}


def end_event(exit_code: int, signal: Optional[str], error: Optional[str] = None) -> dict[str, Any]:
    """
    The event that says a process ended, as envd words it: an exit's code
    (absent when 0) and ``exit status N``; a signal's code -1, ``exited``
    false and ``signal: <words>``; the status again as the error unless the
    process exited with 0.
    """
    if signal is None:
        code, status = exit_code, f"exit status {exit_code}"
    else:
        code, status = -1, f"signal: {SIGNAL_WORDS.get(signal, signal)}"
    end: dict[str, Any] = {"status": status}
    if code:
        end["exitCode"] = code
    if signal is None:
        end["exited"] = True
    if error is not None or code:
        end["error"] = status if error is None else error
    return {"event": {"end": end}}


__all__ = ["MAX_INPUT", "MAX_SIZE", "MAX_TEXT", "MAX_WORDS", "ProcessConfig", "SIGNALS", "SIGNAL_WORDS", "Selector",
           "StartSpec", "data_event", "end_event", "keepalive_event", "process_config", "process_input", "pty_size",
           "selector", "signal_name", "start_event", "start_spec"]
