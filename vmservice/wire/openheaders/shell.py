# -*- test-case-name: tests.wire.test_openheaders -*-
"""
The OPEN header of a shell stream (``{"op": "shell", ...}``,
:class:`ShellHeader`), written by the host and read by the guest (documented
in ``docs/agent-protocol.md``).  Stdlib only: the guest imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from vmservice.wire.openheaders.fields import BadHeader, header_object, is_int, words

#: One more than the largest uid, gid, width or height a shell header may name.
_LIMIT = 2**32


def _count(header: Mapping[str, Any], name: str, default: int) -> int:
    value = header.get(name, default)
    if not is_int(value) or not 0 <= value < _LIMIT:
        raise BadHeader(f"field {name!r} must be an integer 0 .. {_LIMIT - 1}")
    return int(value)


@dataclass(frozen=True)
class ShellHeader:
    """
    An interactive login shell on a terminal in the guest: the OPEN header of
    a shell stream.

    :ivar uid: user id (0 = root).
    :ivar gid: group id.
    :ivar shell: the shell program, run as ``shell -l``.
    :ivar cwd: working directory (as an exec's; empty = the user's home).
    :ivar cols: the terminal's width at start.
    :ivar rows: the terminal's height at start.
    :ivar env: ``KEY=VALUE`` entries laid over the shell's environment
        (later ones win; ``TERM`` among them replaces ``xterm-256color``).
    """

    uid: int = 0
    gid: int = 0
    shell: str = "/bin/bash"
    cwd: str = ""
    cols: int = 80
    rows: int = 24
    env: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object (``env`` only when there are entries: older guests know no such field)."""
        fields: dict[str, Any] = {"op": "shell", "uid": self.uid, "gid": self.gid, "shell": self.shell,
                                  "cwd": self.cwd, "cols": self.cols, "rows": self.rows}
        if self.env:
            fields["env"] = list(self.env)
        return fields

    @classmethod
    def from_json(cls, value: object) -> ShellHeader:
        """
        Read and check a header (its ``op`` is not looked at).

        :raises BadHeader: a number out of range, ``shell`` or ``cwd`` not a
            string, ``env`` not a list of strings.
        """
        header = header_object(value)
        uid, gid = _count(header, "uid", 0), _count(header, "gid", 0)
        cols, rows = _count(header, "cols", 80), _count(header, "rows", 24)
        shell, cwd = header.get("shell", "/bin/bash"), header.get("cwd", "")
        if not isinstance(shell, str) or not isinstance(cwd, str):
            raise BadHeader("fields 'shell' and 'cwd' must be strings")
        return cls(uid=uid, gid=gid, shell=shell, cwd=cwd, cols=cols, rows=rows, env=words(header, "env"))


__all__ = ["ShellHeader"]
