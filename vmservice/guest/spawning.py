# -*- test-case-name: tests.guest.test_execution,tests.integration.guest.test_execution -*-
"""
Starting an exec's process (:func:`prepare`, then :func:`spawn`) and reading
its end (:func:`exit_status`).

Standard library only.  A process is started on the agent's own
:class:`~vmservice.guest.loop.Loop`, without :mod:`subprocess` (whose import
costs under TCG), in one of two ways:

- :func:`os.posix_spawn` when the agent already has the identity asked for (the
  default: root asks for uid 0 and gid 0).  glibc spawns with
  ``clone(CLONE_VM | CLONE_VFORK)``, which copies no page tables: under TCG it
  costs about 10 ms where :func:`os.fork` of the agent costs about 30 ms.
  ``posix_spawn`` cannot change directory or umask in the child, so the agent
  sets its own around the call and restores them right after; that is safe
  because the agent is one thread and the child has exec'd (or failed) when
  the call returns.
- :func:`os.fork` and :func:`os.execve` (:func:`_child`) when the process must
  run as another user or group.
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass
from typing import NoReturn, Optional

from vmservice.guest.exec_spec import DEFAULT_PATH, argv as spec_argv, build_env, passwd_entry, resolve_cwd, shell_program
from vmservice.wire.openheaders.exec import ExecHeader


class Rejected(ValueError):
    """
    The request itself is wrong (a ``cwd`` that does not exist ...): the host answers 400.
    """


class CannotStart(Exception):
    """
    The process cannot be started.

    :ivar message: why, for a person.
    :ivar exit_code: 127 (the program was not found) or 126 (anything else).
    """

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@dataclass(frozen=True)
class Launch:
    """
    Everything :func:`spawn` needs, resolved from an :class:`ExecHeader` by :func:`prepare`.
    """

    spec: ExecHeader
    program: str
    argv: list[str]
    env: dict[str, str]
    cwd: str


def prepare(spec: ExecHeader) -> Launch:
    """
    Resolve the user, working directory, environment and program of ``spec``.

    :raises Rejected: the working directory cannot be used.
    :raises CannotStart: the program is not found (127).
    """
    user = passwd_entry(spec.uid)
    try:
        cwd = resolve_cwd(spec.cwd, user[1] if user else None)
    except ValueError as e:
        raise Rejected(str(e)) from None
    # An empty cwd resolved to a home found a directory just now, or to "/".
    if spec.cwd and not os.path.isdir(cwd):
        raise Rejected(f"cwd {cwd!r} is not a directory in the guest")
    env = build_env(spec, user)
    argv = spec_argv(spec)
    try:
        program = _find_program(argv[0], env.get("PATH", DEFAULT_PATH))
    except OSError as e:
        raise CannotStart(f"{argv[0]}: command not found" if e.errno == errno.ENOENT else str(e), 127) from None
    # The shell, or a program that is /bin/bash itself (E2B's commands are `/bin/bash -l -c ...`).
    program = shell_program(program)
    return Launch(spec, program, argv, env, cwd)


def spawn(launch: Launch, stdio: tuple[int, int, int], opened: list[int]) -> int:
    """
    Start ``launch`` in a new session with ``stdio`` as its descriptors, which
    are closed here (and removed from ``opened``, the caller's list of
    descriptors to close on failure).  Returns the pid.

    :raises CannotStart: the program could not be executed.
    """
    spec = launch.spec
    failure: Optional[tuple[int, str]] = None
    pid = -1
    if _identity_is_set(spec):
        try:
            pid = _spawn_inheriting(spec, launch.program, launch.argv, launch.env, launch.cwd, stdio)
        except OSError as e:
            failure = (e.errno or 0, e.strerror or str(e))
        for fd in stdio:
            os.close(fd)
            opened.remove(fd)
    else:
        pid, failure = _fork(spec, launch.program, launch.argv, launch.env, launch.cwd, stdio, opened)
    if failure is not None:
        failed_errno, message = failure
        if failed_errno == errno.ENOENT:
            raise CannotStart(f"{launch.argv[0]}: command not found ({message})", 127)
        raise CannotStart(f"{launch.argv[0]}: {message}", 126)
    return pid


def read_report(fd: int) -> bytes:
    """
    Everything a forked child wrote on its report pipe ``fd`` before it exec'd
    (nothing when the exec succeeded: close-on-exec ends the pipe); closes ``fd``.
    """
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def exit_reporting(fd: int, message: str) -> NoReturn:
    """In a forked child whose exec failed: write ``message`` on its report pipe ``fd`` (:func:`read_report`), exit 127."""
    try:
        os.write(fd, message.encode("utf-8", "replace")[:4000])
    finally:
        os._exit(127)


def _fork(
    spec: ExecHeader,
    program: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    stdio: tuple[int, int, int],
    opened: list[int],
) -> tuple[int, Optional[tuple[int, str]]]:
    """
    Start the process with :func:`os.fork` and :func:`_child` (another
    identity); closes ``stdio``.  Returns the pid and, if the child failed
    before exec (it has been reaped then), ``(errno, message)``.
    """
    report_r, report_w = os.pipe()
    opened.extend((report_r, report_w))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child execs or exits
        _child(spec, program, argv, env, cwd, stdio, report_w)
    for fd in (*stdio, report_w):
        os.close(fd)
        opened.remove(fd)
    # The child writes here only if it fails before exec (CLOEXEC closes it).
    report = read_report(report_r)
    opened.remove(report_r)
    if not report:
        return pid, None
    os.waitpid(pid, 0)
    code_text, _, message = report.decode("utf-8", "replace").partition(":")
    return pid, (int(code_text) if code_text.isdigit() else 0, message)


def _find_program(name: str, path: str) -> str:
    """
    Where ``execvpe`` would find ``name``; raises ``FileNotFoundError`` if nowhere.
    """
    if "/" in name:
        return name
    for directory in path.split(":"):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(errno.ENOENT, f"{name}: command not found")


def _child(
    spec: ExecHeader,
    program: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    fds: tuple[int, int, int],
    report: int,
) -> None:
    """
    In the forked child: new session (and process group), identity, umask,
    directory, stdio, then exec.  Any failure is written to ``report`` as
    ``"<errno>:<message>"`` and the child exits 127; never returns.
    """
    try:
        os.setsid()
        for number in _DEFAULT_SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        if spec.uid != 0 or spec.gid != 0 or os.getuid() == 0:
            if os.getuid() == 0:
                os.setgroups([])
            os.setgid(spec.gid)
            os.setuid(spec.uid)
        if spec.umask is not None:
            os.umask(spec.umask)
        os.chdir(cwd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.execve(program, argv, env)
    except OSError as e:
        message = f"{e.errno or 0}:{e.strerror or e}"
    except BaseException as e:  # noqa: BLE001 - the child must never return
        message = f"0:{e!r}"
    exit_reporting(report, message)


#: Signals the child gets back at their default action: the agent ignores
#: SIGPIPE and SIGXFSZ (as every Python program does) and handles the others;
#: SIGINT and SIGQUIT may come ignored from whatever started the agent (a
#: shell's background job), SIGHUP too (``nohup``).
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGCHLD,
                    signal.SIGHUP)


def _identity_is_set(spec: ExecHeader) -> bool:
    """
    Whether the child may simply inherit the agent's identity: what :func:`_child`
    would do to it (``setgroups([])``, ``setgid``, ``setuid``) changes nothing.
    """
    uid = os.getuid()
    if uid != 0 and spec.uid == 0 and spec.gid == 0:
        return True  # a non-root agent runs the default request as itself (as _child does)
    return (
        os.getresuid() == (spec.uid,) * 3
        and os.getresgid() == (spec.gid,) * 3
        and all(group == spec.gid for group in os.getgroups())
    )


def _spawn_inheriting(spec: ExecHeader, program: str, argv: list[str], env: dict[str, str], cwd: str,
                      fds: tuple[int, int, int]) -> int:
    """
    Start the process with :func:`os.posix_spawn` (see the module docstring): a
    new session, default signal actions, ``fds`` as its stdio, ``cwd`` and the
    umask set by the agent around the call.  Returns the pid.

    :raises OSError: the directory or the program failed, as :func:`_child`
        would have reported it.
    """
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.chdir(cwd)
        previous_umask = os.umask(spec.umask) if spec.umask is not None else None
        try:
            return os.posix_spawn(
                program,
                argv,
                env,
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)],
                setsid=True,
                setsigdef=_DEFAULT_SIGNALS,
            )
        finally:
            if previous_umask is not None:
                os.umask(previous_umask)
            os.fchdir(here)
    finally:
        os.close(here)


def exit_status(status: int) -> tuple[int, Optional[str]]:
    """
    ``(exit_code, signal name or None)`` of a wait status: a process killed by
    signal N has exit code 128 + N, as in a shell.
    """
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name: Optional[str] = signal.Signals(number).name
        except ValueError:
            name = f"SIG{number}"
        return 128 + number, name
    return os.waitstatus_to_exitcode(status), None


__all__ = ["CannotStart", "Launch", "Rejected", "exit_reporting", "exit_status", "prepare", "read_report", "spawn"]
