# -*- test-case-name: tests.wire.test_requestheaders -*-
"""
The OPEN header of a file-system request (``{"op": "fs", "action": ...}``,
:class:`FsHeader`), written by the host and read by the guest (documented in
``docs/agent-protocol.md``).  Stdlib only: the guest imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from vmservice.wire.openheaders.copy import checked_path
from vmservice.wire.openheaders.fields import BadHeader, flag, header_object, is_int

#: The actions of the ``fs`` operation.
ACTIONS = ("readdir", "stat", "mkdir", "remove", "rename", "setmeta")
#: Mode of a directory made by ``mkdir`` when the header gives none.
DEFAULT_DIRECTORY_MODE = 0o755
#: The extended attributes' namespace of an entry's metadata (``setmeta``, ``details``).
METADATA_PREFIX = "user.e2b."
#: Bytes of an entry's metadata, counted as envd does (prefix, key and value of each).
MAX_METADATA_BYTES = 4096
#: Bytes of one metadata key.
MAX_METADATA_KEY = 255 - len(METADATA_PREFIX)


def _owner_id(header: Mapping[str, Any], name: str) -> Optional[int]:
    value = header.get(name)
    if value is not None and (not is_int(value) or not 0 <= value < 2**32 - 1):
        raise BadHeader(f"{name} must be null or 0 .. 4294967294")
    return value


def _printable(text: str) -> bool:
    return all(0x20 <= ord(c) <= 0x7E for c in text)


def checked_metadata(value: object) -> tuple[tuple[str, str], ...]:
    """
    Metadata to set: an object of printable-ASCII keys (1 to
    :data:`MAX_METADATA_KEY` bytes) and values, :data:`MAX_METADATA_BYTES` in all.

    :raises BadHeader: anything else.
    """
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise BadHeader("metadata must be an object of strings")
    total = 0
    for key, item in value.items():
        if not key or len(key) > MAX_METADATA_KEY or not _printable(key) or not _printable(item):
            raise BadHeader("metadata keys (1 to 246 bytes) and values must be printable ASCII")
        total += len(METADATA_PREFIX) + len(key) + len(item)
    if total > MAX_METADATA_BYTES:
        raise BadHeader(f"metadata is over {MAX_METADATA_BYTES} bytes")
    return tuple(sorted(value.items()))


@dataclass(frozen=True)
class FsHeader:
    """
    One file-system request: the OPEN header of an ``fs`` stream.

    :ivar action: one of :data:`ACTIONS`.
    :ivar path: absolute, or ``~``/``~/...`` (root's home directory).
    :ivar recursive: ``mkdir``: make missing parents and accept an existing
        directory; ``remove``: remove a whole tree.  Not sent (and read as
        false) for the other actions.
    :ivar mode: ``mkdir``: the new directory's mode (0 .. 0o7777).  Not sent
        (and read as the default) for the other actions.
    :ivar destination: ``rename``: where ``path`` goes (checked as ``path``).
    :ivar details: the entries answered carry their owner, group, symlink
        target and metadata (sent only when true).
    :ivar uid: ``mkdir``, ``rename``: the owner of every directory made
        (``mkdir`` then refuses an existing one); ``None`` for root.
    :ivar gid: their group, likewise.
    :ivar metadata: ``setmeta``: the ``user.e2b.<key>`` attributes to set.
    """

    action: str
    path: str
    recursive: bool = False
    mode: int = DEFAULT_DIRECTORY_MODE
    destination: str = ""
    details: bool = False
    uid: Optional[int] = None
    gid: Optional[int] = None
    metadata: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object: each optional field for the actions that read it, when it says something."""
        header: dict[str, Any] = {"op": "fs", "action": self.action, "path": self.path}
        if self.action in ("mkdir", "remove"):
            header["recursive"] = self.recursive
        if self.action == "mkdir":
            header["mode"] = self.mode
        if self.action == "rename":
            header["destination"] = self.destination
        if self.details:
            header["details"] = True
        if self.action in ("mkdir", "rename"):
            header.update((name, value) for name, value in (("uid", self.uid), ("gid", self.gid))
                          if value is not None)
        if self.action == "setmeta":
            header["metadata"] = dict(self.metadata)
        return header

    @classmethod
    def from_json(cls, value: object) -> FsHeader:
        """
        Read and check a header (its ``op`` is not looked at): the action, the
        path, then the fields its action reads.

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
        destination = checked_path(header.get("destination")) if action == "rename" else ""
        owned = action in ("mkdir", "rename")
        uid, gid = (_owner_id(header, "uid"), _owner_id(header, "gid")) if owned else (None, None)
        metadata = checked_metadata(header.get("metadata")) if action == "setmeta" else ()
        return cls(str(action), path, recursive, mode, destination, flag(header, "details"), uid, gid, metadata)


__all__ = ["ACTIONS", "DEFAULT_DIRECTORY_MODE", "FsHeader", "MAX_METADATA_BYTES", "MAX_METADATA_KEY",
           "METADATA_PREFIX", "checked_metadata"]
