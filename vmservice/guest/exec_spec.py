# -*- test-case-name: tests.guest.test_execution,tests.integration.guest.test_execution -*-
"""
What an exec runs, from its OPEN header (:class:`ExecSpec`), and what it
resolves to in this guest: the shell (:func:`usable_shell`, :func:`shell_program`),
the user's ``/etc/passwd`` entry, the working directory, PATH and the environment.
Shared by exec, background execs and the shell.  Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

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


__all__ = [
    "DEFAULT_PATH",
    "DEFAULT_SHELL",
    "RUNTIME_BIN",
    "STATIC_SHELL",
    "BadExecHeader",
    "ExecSpec",
    "build_env",
    "default_path",
    "passwd_entry",
    "resolve_cwd",
    "shell_program",
    "shell_quote",
    "usable_shell",
]
