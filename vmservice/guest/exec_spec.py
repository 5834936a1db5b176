# -*- test-case-name: tests.guest.test_execution,tests.integration.guest.test_execution -*-
"""
What an exec (its OPEN header, :class:`~vmservice.wire.openheaders.exec.ExecHeader`)
resolves to in this guest: the shell (:func:`usable_shell`, :func:`shell_program`), the argv,
the user's ``/etc/passwd`` entry, the working directory, PATH and the environment.
Shared by exec, background execs and the shell.  Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable, Optional

from vmservice.wire.openheaders.exec import ExecHeader

#: PATH of a process whose request does not set one.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The busybox applets and shell of the runtime an imported image brings
#: (``vmservice/images/runtime.py``): the end of PATH, and the shell of last resort.
RUNTIME_BIN = "/opt/vmservice/runtime/bin"
#: The shell of a request that names none (the host's default too).
DEFAULT_SHELL = "/bin/bash"
#: Debian's statically linked build of the same bash (package ``bash-static``),
#: run in place of :data:`DEFAULT_SHELL` when the image has it (argv[0] stays
#: ``/bin/bash``), as the shell or as the program itself.  Under TCG a dynamically linked program is translated again
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
    The file to execute for ``program`` (a shell, or the program an exec
    without a shell names): :data:`STATIC_SHELL` for
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


def shell_quote(word: str) -> str:
    """
    ``word`` as one POSIX shell word (what :func:`shlex.quote` does, without
    importing :mod:`shlex`).
    """
    if word and all(c.isalnum() or c in "@%+=:,./-_" for c in word) and word.isascii():
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def runnable(spec: ExecHeader) -> ExecHeader:
    """
    ``spec`` (as read from its OPEN header) with the shell this guest runs for
    it (:func:`usable_shell`).
    """
    return replace(spec, shell=usable_shell(spec.shell))


def argv(spec: ExecHeader) -> list[str]:
    """
    The process's argv: ``[shell, "-c", cmd + quoted args]`` or ``[cmd, *args]``.
    """
    if spec.shell:
        line = " ".join([spec.cmd] + [shell_quote(a) for a in spec.args])
        return [spec.shell, "-c", line]
    return [spec.cmd, *spec.args]


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
    The absolute working directory for ``cwd`` (see :class:`~vmservice.wire.openheaders.exec.ExecHeader`).

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


def build_env(spec: ExecHeader, user: Optional[tuple[str, str]]) -> dict[str, str]:
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
    "argv",
    "build_env",
    "default_path",
    "passwd_entry",
    "resolve_cwd",
    "runnable",
    "shell_program",
    "shell_quote",
    "usable_shell",
]
