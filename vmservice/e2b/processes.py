# -*- test-case-name: tests.e2b.test_processes -*-
"""
The processes started through the sandboxes' data planes, kept on the host:
a table for each sandbox (at most :data:`MAX_PROCESSES` at a time, beyond
that ``resource_exhausted``), each process a machine of
:mod:`.process_state` found by its pid or tag.

A command runs as an exec in the guest without a shell (the SDKs send
``/bin/bash -l -c CMD`` as program and arguments), as the call's user, in
its working directory (the user's home by default), with umask 022 and the
sandbox's create-time environment under the command's own; a command with
a terminal runs as the guest's shell on a pseudo-terminal (``cmd -l``, the
same environment).  While it runs the sandbox's idle timer is held.  A
process leaves its table when it ends, when its guest is lost (a pause
drops the guest's connection: the guest ends what it ran for it) and when
its sandbox's node is deleted.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from ..errors import AgentError
from ..guestport.exec import ExecRequest, IExecProcess, IExecSink
from ..guestport.guest import IGuest
from ..guestport.shell import IShellSession, IShellSink, ShellRequest
from .connect import Code, ConnectError
from .data_plane import MessageSink
from .host import SandboxHost
from .process_messages import ProcessConfig, Selector, StartSpec
from .process_state import KEEPALIVE_SECONDS, ProcessControls, ProcessCore, ProcessLife, process_life
from .users import EnvdUser

#: Most processes one sandbox's table holds (starting or running).
MAX_PROCESSES = 256
#: The umask of every process (envd's).
UMASK = 0o022


@frozen
class Process:
    """
    A process of a table.

    :ivar config: the command as its client asked for it.
    :ivar tag: its tag.
    :ivar pty: whether it runs on a terminal.
    :ivar life: its machine.
    :ivar core: what the machine acts with (its pid, its controls).
    """

    config: ProcessConfig
    tag: Optional[str]
    pty: bool
    life: ProcessLife
    core: ProcessCore

    @property
    def pid(self) -> Optional[int]:
        """Its pid in the guest, once it runs."""
        return self.core.pid

    @property
    def controls(self) -> ProcessControls:
        """What acts on it in the guest."""
        assert self.core.controls is not None
        return self.core.controls


def environment(sandbox_env: tuple[tuple[str, str], ...], config: ProcessConfig) -> tuple[str, ...]:
    """A command's ``KEY=VALUE`` entries: the sandbox's, then the command's own (later ones win)."""
    return tuple(f"{name}={value}" for name, value in (*sandbox_env, *config.envs))


def exec_request(spec: StartSpec, user: EnvdUser, env: tuple[str, ...]) -> ExecRequest:
    """The exec that runs a command without a terminal."""
    config = spec.config
    return ExecRequest(cmd=config.cmd, args=config.args, env=env, uid=user.uid, gid=user.gid,
                       cwd=user.home if config.cwd is None or config.cwd == "" else config.cwd, shell="",
                       umask=UMASK, stdin=spec.stdin)


def shell_request(spec: StartSpec, user: EnvdUser, env: tuple[str, ...]) -> ShellRequest:
    """The shell that runs a command on a terminal (its arguments are not passed: it runs as ``cmd -l``)."""
    config = spec.config
    cols, rows = spec.pty or (80, 24)
    return ShellRequest(uid=user.uid, gid=user.gid, shell=config.cmd,
                        cwd=user.home if not config.cwd else config.cwd, cols=cols, rows=rows, env=env)


def _started(life: ProcessLife, pid: int) -> None:
    """A pid from the guest, to the machine; one no guest has (a forgery) ends the process instead."""
    if 0 < pid < 2**32:
        life.started(pid)
    else:
        life.forget()


@implementer(IExecSink)
class _ExecEvents:
    """An exec's events, to its machine."""

    def __init__(self, life: ProcessLife) -> None:
        self._life = life

    def started(self, pid: int) -> None:
        _started(self._life, pid)

    def output(self, name: str, data: bytes) -> None:
        self._life.output(name, data)

    def exited(self, exit_code: int, signal: str | None) -> None:
        self._life.exited(exit_code, signal)

    def failed(self, message: str, exit_code: int) -> None:
        self._life.failed(message)

    def lost(self, error: AgentError) -> None:
        self._life.lost(error)


@implementer(IShellSink)
class _ShellEvents:
    """A terminal's events, to its machine."""

    def __init__(self, life: ProcessLife) -> None:
        self._life = life

    def started(self, pid: int) -> None:
        _started(self._life, pid)

    def output(self, data: bytes) -> None:
        self._life.output("pty", data)

    def exited(self, exit_code: int, signal: str | None) -> None:
        self._life.exited(exit_code, signal)

    def lost(self, error: AgentError) -> None:
        self._life.lost(error)


class _ExecControls:
    """:class:`ProcessControls` over an exec."""

    def __init__(self, process: IExecProcess, stdin: bool) -> None:
        self._process, self._stdin = process, stdin

    def write(self, name: str, data: bytes) -> None:
        if name != "stdin":
            raise ConnectError(Code.INTERNAL, "no tty assigned to process — input should be written to the stdin")
        if not self._stdin:
            raise ConnectError(Code.INTERNAL, "error writing to stdin: stdin not enabled or closed")
        self._process.write_stdin(data)

    def close_stdin(self) -> None:
        if self._stdin:
            self._stdin = False
            self._process.close_stdin()

    def resize(self, cols: int, rows: int) -> None:
        raise ConnectError(Code.FAILED_PRECONDITION, "the process has no terminal to resize")

    def kill(self) -> None:
        self._process.kill()


class _TerminalControls:
    """:class:`ProcessControls` over a shell on a terminal."""

    def __init__(self, session: IShellSession) -> None:
        self._session = session

    def write(self, name: str, data: bytes) -> None:
        if name != "pty":
            raise ConnectError(Code.INTERNAL, "tty assigned to process — input should be written to the pty, "
                                              "not the stdin")
        self._session.write(data)

    def close_stdin(self) -> None:
        raise ConnectError(Code.UNKNOWN, "cannot close stdin for PTY process — send Ctrl+D (0x04) instead")

    def resize(self, cols: int, rows: int) -> None:
        self._session.resize(cols, rows)

    def kill(self) -> None:
        self._session.hangup()


class ProcessTable:
    """
    One sandbox's processes.

    :param clock: the keepalives' clock.
    :param hold: holds the sandbox's idle timer until the returned function is called.
    :param limit: most processes at a time.
    :param keepalive: seconds between keepalives.
    """

    def __init__(self, clock: IReactorTime, hold: Callable[[], Callable[[], None]], limit: int = MAX_PROCESSES,
                 keepalive: float = KEEPALIVE_SECONDS) -> None:
        self._clock, self._hold, self._limit, self._keepalive = clock, hold, limit, keepalive
        self._processes: list[Process] = []
        self._by_pid: dict[int, Process] = {}

    def __len__(self) -> int:
        return len(self._processes)

    def start(self, guest: IGuest, spec: StartSpec, user: EnvdUser, sandbox_env: tuple[tuple[str, str], ...],
              sink: MessageSink) -> tuple[Process, Deferred[None]]:
        """
        Ask ``guest`` to run ``spec`` as ``user``, ``sink`` subscribed first:
        the process and the subscription's end.  The process is in the table
        until it ends.

        :raise ConnectError: ``resource_exhausted`` when the table is full.
        """
        if len(self._processes) >= self._limit:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, f"a sandbox runs at most {self._limit} processes at a time")
        release = self._hold()
        entry: list[Process] = []

        def running(pid: int) -> None:
            self._by_pid[pid] = entry[0]

        def ended() -> None:
            process = entry[0]
            if process.pid is not None and self._by_pid.get(process.pid) is process:
                del self._by_pid[process.pid]
            self._processes.remove(process)
            release()

        core = ProcessCore(self._clock, running, ended, self._keepalive)
        life = process_life(core)
        process = Process(spec.config, spec.tag, spec.pty is not None, life, core)
        entry.append(process)
        self._processes.append(process)
        done = life.subscribe(sink)
        env = environment(sandbox_env, spec.config)
        try:
            if spec.pty is None:
                core.controls = _ExecControls(guest.exec(exec_request(spec, user, env), _ExecEvents(life)),
                                              spec.stdin)
            else:
                core.controls = _TerminalControls(guest.shell(shell_request(spec, user, env), _ShellEvents(life)))
        except Exception as error:
            life.lost(error)
        return process, done

    def running(self) -> Iterator[Process]:
        """The processes that run, in the order they started."""
        return (process for process in self._processes if process.pid is not None)

    def find(self, chosen: Selector) -> Process:
        """
        The running process ``chosen`` names.

        :raise ConnectError: ``not_found``.
        """
        if chosen.pid is not None:
            process = self._by_pid.get(chosen.pid)
            if process is not None:
                return process
            raise ConnectError(Code.NOT_FOUND, f"process with pid {chosen.pid} not found")
        for process in self.running():
            if process.tag is not None and process.tag == chosen.tag:
                return process
        raise ConnectError(Code.NOT_FOUND, f"process with tag {(chosen.tag or '')[:200]} not found")

    def forget(self) -> None:
        """Kill every process and break its streams (the sandbox is gone)."""
        for process in list(self._processes):
            process.life.forget()


class Processes:
    """
    The tables of every sandbox, each dropped when its sandbox's node is deleted.

    :param clock: the keepalives' clock.
    :param host: the nodes (idle holds, deletions).
    :param limit: most processes of one sandbox at a time.
    :param keepalive: seconds between keepalives.
    """

    def __init__(self, clock: IReactorTime, host: SandboxHost, limit: int = MAX_PROCESSES,
                 keepalive: float = KEEPALIVE_SECONDS) -> None:
        self._clock, self._host, self._limit, self._keepalive = clock, host, limit, keepalive
        self._tables: dict[str, ProcessTable] = {}
        self.stop_listening = host.on_deleted(self.forget)

    def table(self, sandbox_id: str) -> ProcessTable:
        """Sandbox ``sandbox_id``'s table (made when first needed)."""
        table = self._tables.get(sandbox_id)
        if table is None:
            table = self._tables[sandbox_id] = ProcessTable(self._clock, lambda: self._host.hold(sandbox_id),
                                                            self._limit, self._keepalive)
        return table

    def forget(self, sandbox_id: str) -> None:
        """Drop sandbox ``sandbox_id``'s table, its processes killed and their streams broken."""
        table = self._tables.pop(sandbox_id, None)
        if table is not None:
            table.forget()


__all__ = ["MAX_PROCESSES", "Process", "ProcessTable", "Processes", "UMASK", "environment", "exec_request",
           "shell_request"]
