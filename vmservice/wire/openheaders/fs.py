# -*- test-case-name: tests.wire.test_requestheaders -*-
"""
The OPEN header of a file-system request (``{"op": "fs", "action": ...}``,
:class:`FsHeader`), written by the host and read by the guest (documented in
``docs/agent-protocol.md``).  Stdlib only: the guest imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vmservice.wire.openheaders.copy import checked_path
from vmservice.wire.openheaders.fields import BadHeader, flag, header_object, is_int

#: The actions of the ``fs`` operation.
ACTIONS = ("readdir", "stat", "mkdir", "remove")
#: Mode of a directory made by ``mkdir`` when the header gives none.
DEFAULT_DIRECTORY_MODE = 0o755


@dataclass(frozen=True)
class FsHeader:
    """
    One file-system request: the OPEN header of an ``fs`` stream.

    :ivar action: one of :data:`ACTIONS`.
    :ivar path: absolute, or ``~``/``~/...`` (root's home directory).
    :ivar recursive: ``mkdir``: make missing parents and accept an existing
        directory; ``remove``: remove a whole tree.  Not sent (and read as
        false) for ``stat`` and ``readdir``.
    :ivar mode: ``mkdir``: the new directory's mode (0 .. 0o7777).  Not sent
        (and read as the default) for the other actions.
    """

    action: str
    path: str
    recursive: bool = False
    mode: int = DEFAULT_DIRECTORY_MODE

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object: ``recursive`` and ``mode`` for the actions that read them."""
        header: dict[str, Any] = {"op": "fs", "action": self.action, "path": self.path}
        if self.action in ("mkdir", "remove"):
            header["recursive"] = self.recursive
        if self.action == "mkdir":
            header["mode"] = self.mode
        return header

    @classmethod
    def from_json(cls, value: object) -> FsHeader:
        """
        Read and check a header (its ``op`` is not looked at): the action, the
        path, then ``mode`` (``mkdir``), then ``recursive`` (``mkdir``, ``remove``).

        :raises BadHeader: naming the field.
        """
        header = header_object(value)
        action = header.get("action")
        if action not in ACTIONS:
            raise BadHeader(f"unknown action {action!r}")
        path = checked_path(header.get("path"))
        mode = header.get("mode", DEFAULT_DIRECTORY_MODE) if action == "mkdir" else DEFAULT_DIRECTORY_MODE
        if not is_int(mode) or not 0 <= mode <= 0o7777:
            raise BadHeader("mode must be an integer from 0 to 0o7777")
        recursive = flag(header, "recursive") if action in ("mkdir", "remove") else False
        return cls(str(action), path, recursive, mode)


__all__ = ["ACTIONS", "DEFAULT_DIRECTORY_MODE", "FsHeader"]
