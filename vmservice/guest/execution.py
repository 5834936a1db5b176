# -*- test-case-name: tests.guest.test_execution,tests.integration.guest.test_execution -*-
"""
``{"op": "exec"}``: run one process in the guest and stream its output back.

Stdlib only (it runs inside the VM, and the host imports the record codec from
here too).  The process is started on the agent's own
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

Inside the stream, host to guest: DATA is the process's stdin, HALF_CLOSE is
EOF on stdin.  Guest to host: a sequence of *records*, each
``type u8 | length u32 (big-endian) | payload`` (see :func:`encode_record`),
so stdout and stderr keep their order and boundaries:

- ``STARTED`` ``{"pid": N}``: the process runs (always the first record, or
  ``ERROR``/``REJECTED`` instead).
- ``STDOUT``/``STDERR``: raw bytes the process wrote (at most 64 KiB each).
- ``EXIT`` ``{"exit_code": N, "signal": "SIGKILL" | null}``: the last record;
  a process killed by a signal has ``exit_code`` 128 + the signal number.
- ``ERROR`` ``{"message": ..., "exit_code": 127 | 126}``: it could not be
  started (127: the program was not found; 126: anything else, e.g. no
  permission, ``setuid`` failed).
- ``REJECTED`` ``{"message": ...}``: the request itself is wrong (e.g. a
  ``cwd`` that does not exist); the host answers 400.

After the last record the agent half-closes.  A reset of the stream (the HTTP
client went away) kills the process group: SIGTERM, then SIGKILL after
:data:`KILL_GRACE` seconds.
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from vmservice.guest.children import Child
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.wire.payloads import (
    ERROR,
    REJECTED,
    STDERR,
    STDOUT,
    encode_json_record,
    encode_record,
    exit_record,
    started_record,
)

#: Bytes read from a child's pipe at a time: one record at most.
READ_SIZE = 64 * 1024
#: The handler stops reading the child's pipes while this much output waits
#: for credit or room on the link.
PENDING_HIGH_WATER = 256 * 1024
#: Seconds between SIGTERM and SIGKILL when the stream is reset.
KILL_GRACE = 0.5
#: PATH of a process whose request does not set one.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The busybox applets and shell of the runtime an imported image brings
#: (``vmservice/images/runtime.py``): the end of PATH, and the shell of last resort.
RUNTIME_BIN = "/opt/vmservice/runtime/bin"
#: The shell of a request that names none (the host's default too).
DEFAULT_SHELL = "/bin/bash"
#: Debian's statically linked build of the same bash (package ``bash-static``),
#: run in place of :data:`DEFAULT_SHELL` when the image has it (argv[0] stays
#: ``/bin/bash``).  Under TCG a dynamically linked program is translated again
#: at every start (ASLR maps ld.so and libc elsewhere each time, and QEMU 7.2
#: keys its translations by virtual address): ``bash -c true`` takes ~110 ms
#: there, the static build, whose code sits at fixed addresses, ~12 ms.
STATIC_SHELL = "/bin/bash-static"


def _can_run(path: str) -> bool:
    return os.access(path, os.X_OK)


def usable_shell(shell: str, can_run: Callable[[str], bool] = _can_run) -> str:
    """
    The shell to run: ``shell`` itself, unless it is the default
    (:data:`DEFAULT_SHELL`) and the image lacks it: then the image's
    ``/bin/sh``, else the runtime's busybox ``sh`` (an imported image without
    a shell).  A shell named otherwise is taken as it is, and fails to start
    if missing; empty stays empty (no shell).
    """
    if shell != DEFAULT_SHELL or can_run(shell):
        return shell
    for candidate in ("/bin/sh", f"{RUNTIME_BIN}/sh"):
        if can_run(candidate):
            return candidate
    return shell


def shell_program(program: str, can_run: Callable[[str], bool] = _can_run) -> str:
    """
    The file to execute for the shell ``program``: :data:`STATIC_SHELL` for
    :data:`DEFAULT_SHELL` when the image has it, else ``program`` itself.
    """
    if program == DEFAULT_SHELL and can_run(STATIC_SHELL):
        return STATIC_SHELL
    return program


def default_path(is_dir: Callable[[str], bool] = os.path.isdir) -> str:
    """
    PATH of a process whose request does not set one: :data:`DEFAULT_PATH`,
    then :data:`RUNTIME_BIN` when the image has it (busybox applets as a last
    resort in an image without tools).
    """
    return f"{DEFAULT_PATH}:{RUNTIME_BIN}" if is_dir(RUNTIME_BIN) else DEFAULT_PATH


def _image_path(known: list[str] = []) -> str:
    """
    :func:`default_path` of this guest, looked up once: the runtime's
    directory comes with the image (``vmservice/images/runtime.py``).
    """
    if not known:
        known.append(default_path())
    return known[0]


# -- the request ---------------------------------------------------------------------------


class BadExecHeader(ValueError):
    """
    The OPEN header is malformed (a host bug: the stream is reset with BAD_HEADER).
    """


def shell_quote(word: str) -> str:
    """
    ``word`` as one POSIX shell word (what :func:`shlex.quote` does, without
    importing :mod:`shlex`).
    """
    if word and all(c.isalnum() or c in "@%+=:,./-_" for c in word) and word.isascii():
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


@dataclass(frozen=True)
class ExecSpec:
    """
    What to run, from the OPEN header.

    :ivar cmd: a command line for ``shell``, or the program when ``shell`` is empty.
    :ivar args: appended as quoted words (shell) or as argv (no shell).
    :ivar env: ``KEY=VALUE`` entries laid over the default environment.
    :ivar uid: user id to run as.
    :ivar gid: group id to run as.
    :ivar cwd: working directory: absolute, ``~``/``~/x`` (the user's home) or
        relative to the home; empty = the home, or ``/`` without one.
    :ivar shell: the shell (``<shell> -c <line>``), or empty for none.
    :ivar umask: the process's umask, or ``None`` to inherit the agent's (022).
    :ivar stdin: whether stream DATA feeds stdin (else stdin is ``/dev/null``).
    :ivar stdout: whether stdout is sent back (else ``/dev/null``).
    :ivar stderr: whether stderr is sent back (else ``/dev/null``).
    """

    cmd: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    uid: int = 0
    gid: int = 0
    cwd: str = ""
    shell: str = "/bin/bash"
    umask: Optional[int] = None
    stdin: bool = False
    stdout: bool = True
    stderr: bool = True

    @classmethod
    def from_header(cls, header: Mapping[str, Any]) -> "ExecSpec":
        """
        Read and type-check the header.

        :raises BadExecHeader: a field is missing or has the wrong type.
        """

        def get(name: str, kind: type, default: Any) -> Any:
            value = header.get(name, default)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise BadExecHeader(f"field {name!r} must be {kind.__name__}")
            return value

        cmd = header.get("cmd")
        if not isinstance(cmd, str) or not cmd:
            raise BadExecHeader("field 'cmd' must be a non-empty string")
        words = {}
        for name in ("args", "env"):
            value = header.get(name, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise BadExecHeader(f"field {name!r} must be a list of strings")
            words[name] = tuple(value)
        umask = header.get("umask")
        if umask is not None and (not isinstance(umask, int) or isinstance(umask, bool) or not 0 <= umask <= 0o777):
            raise BadExecHeader("field 'umask' must be null or 0..0o777")
        uid, gid = get("uid", int, 0), get("gid", int, 0)
        if not 0 <= uid < 2**32 or not 0 <= gid < 2**32:
            raise BadExecHeader("uid and gid must be 0 .. 2^32-1")
        return cls(
            cmd=cmd,
            args=words["args"],
            env=words["env"],
            uid=uid,
            gid=gid,
            cwd=get("cwd", str, ""),
            shell=usable_shell(get("shell", str, "/bin/bash")),
            umask=umask,
            stdin=get("stdin", bool, False),
            stdout=get("stdout", bool, True),
            stderr=get("stderr", bool, True),
        )

    def argv(self) -> list[str]:
        """
        The process's argv: ``[shell, "-c", cmd + quoted args]`` or ``[cmd, *args]``.
        """
        if self.shell:
            line = " ".join([self.cmd] + [shell_quote(a) for a in self.args])
            return [self.shell, "-c", line]
        return [self.cmd, *self.args]


#: The users of each passwd file read so far: ``path -> (stamp, {uid text: (name, home)})``.
_passwd_tables: dict[str, tuple[tuple[int, ...], dict[str, tuple[str, str]]]] = {}


def passwd_entry(uid: int, path: str = "/etc/passwd") -> Optional[tuple[str, str]]:
    """
    ``(name, home)`` of ``uid`` from ``path``, or ``None`` (read directly: the
    :mod:`pwd` module is not in the guest's minimal stdlib everywhere).

    The file is read and parsed again only when its inode, size, modification
    or change time differ from the last read (one ``stat`` per call otherwise:
    every exec asks).
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _passwd_tables.get(path)
    if known is None or known[0] != stamp:
        try:
            with open(path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return None
        table: dict[str, tuple[str, str]] = {}
        for line in lines:
            fields = line.split(":")
            if len(fields) >= 6:
                table.setdefault(fields[2], (fields[0], fields[5]))  # the first line of a uid wins
        known = _passwd_tables[path] = (stamp, table)
    return known[1].get(str(uid))


def resolve_cwd(cwd: str, home: Optional[str]) -> str:
    """
    The absolute working directory for ``cwd`` (see :class:`ExecSpec`).

    :raises ValueError: ``cwd`` needs a home directory the user does not have.
    """
    if cwd.startswith("/"):
        return cwd
    if not cwd:
        return home if home and os.path.isdir(home) else "/"
    if home is None:
        raise ValueError(f"cwd {cwd!r} is relative to the user's home, but the user has none")
    if cwd == "~":
        return home
    if cwd.startswith("~/"):
        return os.path.join(home, cwd[2:])
    if cwd.startswith("~"):
        raise ValueError(f"cwd {cwd!r}: only ~ and ~/ (the user's own home) are supported")
    return os.path.join(home, cwd)


def build_env(spec: ExecSpec, user: Optional[tuple[str, str]]) -> dict[str, str]:
    """
    The process environment: PATH, HOME, USER, LOGNAME and SHELL, then the
    request's ``KEY=VALUE`` entries in order (later ones win).
    """
    env = {"PATH": _image_path(), "HOME": user[1] if user else "/"}
    if user:
        env["USER"] = env["LOGNAME"] = user[0]
    if spec.shell:
        env["SHELL"] = spec.shell
    for entry in spec.env:
        key, _, value = entry.partition("=")
        env[key] = value
    return env


# -- starting the child ---------------------------------------------------------------------


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
    Everything :func:`spawn` needs, resolved from an :class:`ExecSpec` by :func:`prepare`.
    """

    spec: ExecSpec
    program: str
    argv: list[str]
    env: dict[str, str]
    cwd: str


def prepare(spec: ExecSpec) -> Launch:
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
    argv = spec.argv()
    try:
        program = _find_program(argv[0], env.get("PATH", DEFAULT_PATH))
    except OSError as e:
        raise CannotStart(f"{argv[0]}: command not found" if e.errno == errno.ENOENT else str(e), 127) from None
    if spec.shell:
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


def _fork(
    spec: ExecSpec,
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
    spec: ExecSpec,
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
    try:
        os.write(report, message.encode("utf-8", "replace")[:4000])
    finally:
        os._exit(127)


#: Signals the child gets back at their default action: the agent ignores
#: SIGPIPE and SIGXFSZ (as every Python program does) and handles the others;
#: SIGINT and SIGQUIT may come ignored from whatever started the agent (a
#: shell's background job), SIGHUP too (``nohup``).
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGCHLD,
                    signal.SIGHUP)


def _identity_is_set(spec: ExecSpec) -> bool:
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


def _spawn_inheriting(spec: ExecSpec, program: str, argv: list[str], env: dict[str, str], cwd: str,
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


class ExecHandler(StreamHandler):
    """
    Serves ``{"op": "exec", ...}`` (see the module docstring and :class:`ExecSpec`).
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self.pid: Optional[int] = None
        self._child: Optional[Child] = None
        self._stdin = -1
        self._stdin_buffer = bytearray()
        self._stdin_eof = False
        self._outputs: dict[int, int] = {}  # fd -> record type
        self._outputs_watched = False
        self._exited = False
        self._status: Optional[int] = None
        self._finished = False
        self._killing = False

    # -- StreamHandler ---------------------------------------------------------------

    def start(self) -> None:
        try:
            spec = ExecSpec.from_header(self.header)
        except BadExecHeader as e:
            from vmservice.wire.errors import ResetCode

            self.stream.reset(ResetCode.BAD_HEADER, str(e))
            return
        try:
            launch = prepare(spec)
        except Rejected as e:
            self._reject(str(e))
            return
        except CannotStart as e:
            self._fail(e.message, e.exit_code)
            return
        self._spawn(spec, launch)

    def data_received(self, data: bytes) -> None:
        if self._stdin < 0:
            # No stdin (not asked for, closed by the child, or not started).
            self.stream.consumed(len(data))
            return
        self._stdin_buffer += data
        self._write_stdin()

    def half_closed(self) -> None:
        self._stdin_eof = True
        if self._stdin >= 0 and not self._stdin_buffer:
            self._close_stdin()

    def flushed(self) -> None:
        if self.stream.pending < PENDING_HIGH_WATER:
            self._watch_outputs()
        self._maybe_finish()

    def reset(self, code: int, reason: str) -> None:
        """
        The host gave up (its HTTP client went away): kill the process group.
        """
        self._finished = True
        self._close_stdin()
        for fd in list(self._outputs):
            self._close_output(fd)
        if self._child is not None and not self._exited:
            self._killing = True
            self._child.signal(signal.SIGTERM)
            self._child.kill_later(KILL_GRACE)

    # -- starting ----------------------------------------------------------------------

    def _reject(self, message: str) -> None:
        self.stream.write(encode_json_record(REJECTED, {"message": message}))
        self._finished = True
        self.stream.end()

    def _fail(self, message: str, exit_code: int) -> None:
        self.stream.write(encode_json_record(ERROR, {"message": message, "exit_code": exit_code}))
        self._finished = True
        self.stream.end()

    def _spawn(self, spec: ExecSpec, launch: Launch) -> None:
        opened: list[int] = []

        def pipe() -> tuple[int, int]:
            r, w = os.pipe()
            opened.extend((r, w))
            return r, w

        def null(flags: int) -> int:
            fd = os.open(os.devnull, flags | os.O_CLOEXEC)
            opened.append(fd)
            return fd

        try:
            if spec.stdin:
                stdin_child, self._stdin = pipe()
            else:
                stdin_child = null(os.O_RDONLY)
            child_fds = [stdin_child]
            for wanted, kind in ((spec.stdout, STDOUT), (spec.stderr, STDERR)):
                if wanted:
                    r, w = pipe()
                    self._outputs[r] = kind
                    child_fds.append(w)
                else:
                    child_fds.append(null(os.O_WRONLY))
            pid = spawn(launch, (child_fds[0], child_fds[1], child_fds[2]), opened)
        except CannotStart as e:
            self._close_stdin()
            for fd in list(self._outputs):
                self._close_output(fd)
            self._fail(e.message, e.exit_code)
            return
        except BaseException:
            for fd in opened:
                os.close(fd)
            self._stdin = -1
            self._outputs.clear()
            raise
        self.pid = pid
        self._child = Child(self.stream.loop, pid, self._child_exited)
        for fd in self._outputs:
            os.set_blocking(fd, False)
        if self._stdin >= 0:
            os.set_blocking(self._stdin, False)
        self.stream.write(started_record(pid))
        self._watch_outputs()

    # -- stdin -------------------------------------------------------------------------

    def _write_stdin(self) -> None:
        written_total = 0
        while self._stdin_buffer and self._stdin >= 0:
            try:
                written = os.write(self._stdin, self._stdin_buffer[:READ_SIZE])
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                # EPIPE: the process closed its stdin; what remains is discarded.
                written = len(self._stdin_buffer)
                self._close_stdin()
            del self._stdin_buffer[:written]
            written_total += written
        if written_total:
            self.stream.consumed(written_total)
        if self._stdin >= 0:
            if self._stdin_buffer:
                self.stream.loop.watch(self._stdin, None, self._write_stdin)
            else:
                self.stream.loop.watch(self._stdin)
                if self._stdin_eof:
                    self._close_stdin()

    def _close_stdin(self) -> None:
        if self._stdin >= 0:
            self.stream.loop.watch(self._stdin)
            os.close(self._stdin)
            self._stdin = -1
        if self._stdin_buffer:
            count = len(self._stdin_buffer)
            self._stdin_buffer.clear()
            self.stream.consumed(count)

    # -- output ------------------------------------------------------------------------

    def _watch_outputs(self) -> None:
        # Once per change: every write to the stream calls flushed() and so this.
        if self._outputs_watched:
            return
        self._outputs_watched = True
        for fd in self._outputs:
            self.stream.loop.watch(fd, self._output_reader(fd))

    def _output_reader(self, fd: int) -> Callable[[], None]:
        """The loop's callback for a readable output pipe ``fd``."""
        return lambda: self._read_output(fd)

    def _read_output(self, fd: int) -> None:
        kind = self._outputs.get(fd)
        if kind is None:
            return
        try:
            chunk = os.read(fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            if self._exited:
                # The process is gone and the pipe is empty: only something it
                # left running still holds the pipe; do not wait for it.
                self._close_output(fd)
                self._maybe_finish()
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close_output(fd)
            self._maybe_finish()
            return
        self.stream.write(encode_record(kind, chunk))
        if self.stream.pending >= PENDING_HIGH_WATER:
            self._outputs_watched = False
            for out in self._outputs:
                self.stream.loop.watch(out)

    def _close_output(self, fd: int) -> None:
        if self._outputs.pop(fd, None) is not None:
            self.stream.loop.watch(fd)
            os.close(fd)

    # -- exit --------------------------------------------------------------------------

    def _child_exited(self) -> None:
        assert self._child is not None
        if self._killing:
            # Reaped only after the group's SIGKILL: the zombie keeps the
            # process group id from being reused until then.
            self._child.forget()
            self._exited = True
            return
        self._status = self._child.reap()
        self._exited = True
        if self.stream.pending < PENDING_HIGH_WATER:
            # Drain what is in the pipes now; an empty pipe is closed at once.
            for fd in list(self._outputs):
                self._read_output(fd)
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self._finished or not self._exited or self._outputs or self._status is None:
            return
        self._finished = True
        self._close_stdin()
        self.stream.write(exit_record(*exit_status(self._status)))
        self.stream.end()


__all__ = [
    "CannotStart",
    "DEFAULT_PATH",
    "DEFAULT_SHELL",
    "ExecHandler",
    "ExecSpec",
    "Launch",
    "RUNTIME_BIN",
    "Rejected",
    "default_path",
    "exit_status",
    "prepare",
    "read_report",
    "STATIC_SHELL",
    "shell_program",
    "shell_quote",
    "spawn",
    "usable_shell",
]
