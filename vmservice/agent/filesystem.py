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
from ..guestport.files import FsEntry
from ..wire.openheaders.fs import FsHeader
from .channel import Channel
from .errors import AgentRequestFailed

#: Largest reply accepted from the guest, in bytes: a directory of about 200,000
#: entries.  Larger listings fail with 500 rather than grow the daemon's memory.
MAX_FS_REPLY = 32 * 1024 * 1024

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
        name=value["name"], type=value["type"], size=value["size"], mtime_ns=value["mtime_ns"], mode=value["mode"]
    )


async def _call(agent: Channel, header: FsHeader) -> Any:
    body = await agent.request(header.to_json(), MAX_FS_REPLY)
    return reply_result(body, "file-system")


async def stat(agent: Channel, path: str) -> FsEntry:
    """Describe ``path`` itself (a symlink is not followed): absolute, or ``~``/``~/...``."""
    return _entry(await _call(agent, FsHeader("stat", path)))


async def readdir(agent: Channel, path: str) -> list[FsEntry]:
    """The entries of directory ``path``, sorted by name, without ``.`` and ``..``."""
    result = await _call(agent, FsHeader("readdir", path))
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


__all__ = ["ENTRY_TYPES", "MAX_FS_REPLY", "mkdir", "readdir", "remove", "reply_result", "reply_value", "stat"]
