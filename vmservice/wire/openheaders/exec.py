# -*- test-case-name: tests.wire.test_openheaders -*-
"""
The OPEN headers of exec streams (``{"op": "exec", ...}``, :class:`ExecHeader`)
and of starting a background exec (``{"op": "background", "action": "start",
...}``, :class:`BackgroundStartHeader`), written by the host and read by the
guest (documented in ``docs/agent-protocol.md``).  Stdlib only: the guest
imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from vmservice.wire.openheaders.fields import BadHeader, header_object, is_int, typed, words

#: ``ring_bytes`` when the request gives none (1 MiB), and the largest accepted (64 MiB).
DEFAULT_RING_BYTES = 1024 * 1024
MAX_RING_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ExecHeader:
    """
    One command to run in the guest: the OPEN header of an exec stream.

    :ivar cmd: a command line for ``shell``, or the program when ``shell`` is empty.
    :ivar args: appended as quoted words (shell) or as argv (no shell).
    :ivar env: ``KEY=VALUE`` entries laid over the guest's default environment.
    :ivar uid: user id to run as (0 = root).
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

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object."""
        return {
            "op": "exec",
            "cmd": self.cmd,
            "args": list(self.args),
            "env": list(self.env),
            "uid": self.uid,
            "gid": self.gid,
            "cwd": self.cwd,
            "shell": self.shell,
            "umask": self.umask,
            "stdin": self.stdin,
            "stdout": self.stdout,
            "stderr": self.stderr,
        }

    @classmethod
    def from_json(cls, value: object) -> ExecHeader:
        """
        Read and check a header (its ``op`` is not looked at).

        :raises BadHeader: a field is missing or has the wrong type.
        """
        header = header_object(value)
        cmd = header.get("cmd")
        if not isinstance(cmd, str) or not cmd:
            raise BadHeader("field 'cmd' must be a non-empty string")
        args, env = words(header, "args"), words(header, "env")
        umask = header.get("umask")
        if umask is not None and (not is_int(umask) or not 0 <= umask <= 0o777):
            raise BadHeader("field 'umask' must be null or 0..0o777")
        uid, gid = typed(header, "uid", int, 0), typed(header, "gid", int, 0)
        if not 0 <= uid < 2**32 or not 0 <= gid < 2**32:
            raise BadHeader("uid and gid must be 0 .. 2^32-1")
        return cls(
            cmd=cmd,
            args=args,
            env=env,
            uid=uid,
            gid=gid,
            cwd=typed(header, "cwd", str, ""),
            shell=typed(header, "shell", str, "/bin/bash"),
            umask=umask,
            stdin=typed(header, "stdin", bool, False),
            stdout=typed(header, "stdout", bool, True),
            stderr=typed(header, "stderr", bool, True),
        )


@dataclass(frozen=True)
class BackgroundStartHeader:
    """
    The header that starts a background exec.

    :ivar exec: what to run; the guest reads it with stdin from ``/dev/null``
        and both outputs kept, whatever its ``stdin``, ``stdout`` and ``stderr`` say.
    :ivar ring_bytes: most output bytes the guest keeps (1 .. :data:`MAX_RING_BYTES`).
    """

    exec: ExecHeader
    ring_bytes: int = DEFAULT_RING_BYTES

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object: the exec's fields, the action and ``ring_bytes``."""
        fields = self.exec.to_json()
        del fields["op"]
        return {"op": "background", "action": "start", "ring_bytes": self.ring_bytes, **fields}

    @classmethod
    def from_json(cls, value: object) -> BackgroundStartHeader:
        """
        Read and check a header (its ``op`` and ``action`` are not looked at).

        :raises BadHeader: an exec field is wrong (as :meth:`ExecHeader.from_json`),
            or ``ring_bytes`` is out of range.
        """
        header = header_object(value)
        spec = ExecHeader.from_json({**header, "stdin": False, "stdout": True, "stderr": True})
        ring_bytes = header.get("ring_bytes", DEFAULT_RING_BYTES)
        if type(ring_bytes) is not int or not 0 < ring_bytes <= MAX_RING_BYTES:
            raise BadHeader(f"ring_bytes must be 1 .. {MAX_RING_BYTES}")
        return cls(spec, ring_bytes)


__all__ = ["BackgroundStartHeader", "DEFAULT_RING_BYTES", "ExecHeader", "MAX_RING_BYTES"]
