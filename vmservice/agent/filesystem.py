# -*- test-case-name: tests.agent.test_filesystem -*-
"""
The host's side of the guest's file-system operations (``{"op": "fs"}`` streams),
and the reading of the guest's JSON replies.

Each call opens one stream with the JSON of an
:class:`~vmservice.wire.openheaders.fs.FsHeader` (such as
``{"op": "fs", "action": "stat", "path": "/etc/hostname"}``), reads the guest's one
JSON reply (see :mod:`vmservice.guest.filesystem` and ``docs/agent-protocol.md``)
and returns :class:`~vmservice.guestport.files.FsEntry` records, or raises an
:class:`~vmservice.errors.AgentError` of the kind the guest named; what a
kind means for a client is :data:`vmservice.errors.GUEST_ERRORS`.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import AgentError, GuestErrorKind
from ..guestport.files import FsDetails, FsEntry
from ..wire.openheaders.fs import MAX_METADATA_BYTES, FsHeader
from .channel import Channel
from .errors import AgentRequestFailed

#: Largest reply accepted from the guest, in bytes: a directory of about 200,000
#: entries.  Larger listings fail with 500 rather than grow the daemon's memory.
MAX_FS_REPLY = 32 * 1024 * 1024

#: Characters of an owner's or a group's name the guest may report.
MAX_OWNER_NAME = 256
#: Characters of a symlink's target the guest may report (``PATH_MAX``).
MAX_TARGET = 4096

#: The entry types the guest reports.
ENTRY_TYPES = ("file", "directory", "symlink", "char_device", "block_device", "fifo", "socket", "other")


def _malformed(message: str) -> AgentError:
    return AgentRequestFailed(message, kind=GuestErrorKind.MALFORMED)


def reply_value(reply: Any, what: str) -> Any:
    """
    The ``result`` of a guest reply (``{"ok": true, "result": ...}``).

    :param what: the operation, for messages (``file-system``, ``copy``).
    :raises AgentError: the guest's error (its kind as the guest named it),
        or ``MALFORMED`` for a reply that is not one.
    """
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise _malformed(f"the guest's {what} reply is not a {what} reply")
    if not reply["ok"]:
        message = reply.get("message")
        text = message if isinstance(message, str) else f"{what} operation failed"
        raise AgentError(GuestErrorKind.of_guest(reply.get("error")), text)
    return reply.get("result")


def reply_result(body: bytes, what: str) -> Any:
    """:func:`reply_value` of a reply still to be decoded from JSON."""
    try:
        reply = json.loads(body)
    except ValueError:
        raise _malformed(f"the guest's {what} reply is not JSON") from None
    return reply_value(reply, what)


def _entry(value: Any) -> FsEntry:
    if not isinstance(value, dict):
        raise _malformed("the guest's fs reply has a malformed entry")
    fields = {"name": str, "type": str, "size": int, "mtime_ns": int, "mode": int}
    for key, kind in fields.items():
        item = value.get(key)
        if not isinstance(item, kind) or isinstance(item, bool):
            raise _malformed(f"the guest's fs entry has no valid {key!r}")
    return FsEntry(
        name=value["name"], type=value["type"], size=value["size"], mtime_ns=value["mtime_ns"], mode=value["mode"],
        details=_details(value) if "owner" in value else None,
    )


def _text(value: Any, key: str, bound: int, optional: bool = False) -> Any:
    item = value.get(key)
    if (optional and item is None) or (isinstance(item, str) and len(item) <= bound):
        return item
    raise _malformed(f"the guest's fs entry has no valid {key!r}")


def _number(value: Any, key: str, optional: bool = False) -> Any:
    item = value.get(key)
    if (optional and item is None) or (type(item) is int and 0 <= item < 2**32):
        return item
    raise _malformed(f"the guest's fs entry has no valid {key!r}")


def _metadata(value: Any) -> tuple[tuple[str, str], ...]:
    metadata = value.get("metadata", {})
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise _malformed("the guest's fs entry has no valid 'metadata'")
    if sum(len(k) + len(v) for k, v in metadata.items()) > MAX_METADATA_BYTES:
        raise _malformed("the guest's fs entry has metadata over its bound")
    return tuple(sorted(metadata.items()))


def _details(value: dict[str, Any]) -> FsDetails:
    """The details of an entry the guest sent with them, each field checked and bounded."""
    target_type = _text(value, "target_type", 16, optional=True)
    if target_type is not None and target_type not in ENTRY_TYPES:
        raise _malformed("the guest's fs entry has no valid 'target_type'")
    return FsDetails(uid=_number(value, "uid"), gid=_number(value, "gid"),
                     owner=_text(value, "owner", MAX_OWNER_NAME), group=_text(value, "group", MAX_OWNER_NAME),
                     symlink_target=_text(value, "symlink_target", MAX_TARGET, optional=True),
                     target_type=target_type, target_mode=_number(value, "target_mode", optional=True),
                     metadata=_metadata(value))


async def _call(agent: Channel, header: FsHeader) -> Any:
    body = await agent.request(header.to_json(), MAX_FS_REPLY)
    return reply_result(body, "file-system")


async def stat(agent: Channel, path: str, details: bool = False) -> FsEntry:
    """Describe ``path`` itself (a symlink is not followed): absolute, or ``~``/``~/...``."""
    return _entry(await _call(agent, FsHeader("stat", path, details=details)))


async def readdir(agent: Channel, path: str, details: bool = False) -> list[FsEntry]:
    """The entries of directory ``path``, sorted by name, without ``.`` and ``..``."""
    result = await _call(agent, FsHeader("readdir", path, details=details))
    if not isinstance(result, list):
        raise _malformed("the guest's readdir reply is not a list")
    return [_entry(item) for item in result]


async def mkdir(agent: Channel, path: str, recursive: bool, mode: int) -> FsEntry:
    """
    Make directory ``path`` with exactly ``mode``; with ``recursive``, make
    missing parents (0755) and accept an existing directory.
    """
    return _entry(await _call(agent, FsHeader("mkdir", path, recursive, mode)))


async def remove(agent: Channel, path: str, recursive: bool) -> FsEntry:
    """Remove a file, symlink or empty directory (with ``recursive``, a tree); the entry as it was."""
    return _entry(await _call(agent, FsHeader("remove", path, recursive)))


async def make_directory(agent: Channel, path: str, mode: int, uid: int, gid: int) -> FsEntry:
    """Make directory ``path`` and its missing parents owned by ``uid``/``gid``; its detailed entry."""
    return _entry(await _call(agent, FsHeader("mkdir", path, mode=mode, details=True, uid=uid, gid=gid)))


async def rename(agent: Channel, source: str, destination: str, uid: int, gid: int) -> FsEntry:
    """Rename ``source`` to ``destination``, missing parents made owned by ``uid``/``gid``; its detailed entry."""
    return _entry(await _call(agent, FsHeader("rename", source, destination=destination, details=True,
                                              uid=uid, gid=gid)))


async def set_metadata(agent: Channel, path: str, metadata: tuple[tuple[str, str], ...]) -> FsEntry:
    """Set ``path``'s ``user.e2b.<key>`` attributes; its detailed entry."""
    return _entry(await _call(agent, FsHeader("setmeta", path, details=True, metadata=metadata)))


__all__ = ["ENTRY_TYPES", "MAX_FS_REPLY", "MAX_OWNER_NAME", "MAX_TARGET", "make_directory", "mkdir", "readdir",
           "remove", "rename", "reply_result", "reply_value", "set_metadata", "stat"]
