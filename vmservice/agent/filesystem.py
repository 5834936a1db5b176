# -*- test-case-name: tests.agent.test_filesystem -*-
"""
The host's side of the guest's file-system operations (``{"op": "fs"}`` streams).

Each call opens one stream with a header such as
``{"op": "fs", "action": "stat", "path": "/etc/hostname"}``, reads the guest's one
JSON reply (see :mod:`vmservice.guest.filesystem` and ``docs/agent-protocol.md``)
and returns :class:`FsEntry` records, or raises the service error the guest's
error kind maps to.  This is the one place those kinds meet
:mod:`vmservice.errors`; the API only renders.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Protocol

from attrs import frozen

from ..errors import (
    AgentNotConnected,
    BadRequest,
    Conflict,
    Forbidden,
    Internal,
    NotFound,
    NotSupported,
    ServiceError,
)
from ..wire import ResetCode
from .client import AgentRequestFailed, AgentUnavailable

#: Largest reply accepted from the guest, in bytes: a directory of about 200,000
#: entries.  Larger listings fail with 500 rather than grow the daemon's memory.
MAX_FS_REPLY = 32 * 1024 * 1024

#: The entry types the guest reports.
ENTRY_TYPES = ("file", "directory", "symlink", "char_device", "block_device", "fifo", "socket", "other")


@frozen
class FsEntry:
    """
    One file-system entry as the guest saw it (``lstat``: a symlink is itself).

    :ivar name: the base name (``/`` for the root); bytes that are not UTF-8
        arrive as U+FFFD.
    :ivar type: one of :data:`ENTRY_TYPES`.
    :ivar size: ``st_size`` in bytes.
    :ivar mtime_ns: modification time, integer nanoseconds since the Unix epoch.
    :ivar mode: permission bits including setuid, setgid and sticky
        (``st_mode & 0o7777``).
    """

    name: str
    type: str
    size: int
    mtime_ns: int
    mode: int


class RequestingAgent(Protocol):
    """What this module needs of an agent connection (:class:`~vmservice.agent.client.AgentClient`)."""

    async def request(self, header: Mapping[str, Any], limit: int) -> bytes: ...


def format_mode(bits: int) -> str:
    """
    Permission bits as octal text of at least four digits: ``0644``, ``4755``,
    ``1777``.  The same text is used wherever the API shows a file mode.
    """
    return f"{bits & 0o7777:04o}"


def _error(kind: object, message: str) -> ServiceError:
    """
    The service error for a guest error ``kind``.
    """
    if kind == "not_found":
        return NotFound(message, code="not_found")
    if kind == "not_a_directory":
        return BadRequest(message, code="not_a_directory")
    if kind == "not_empty":
        return Conflict(message, code="directory_not_empty")
    if kind == "exists":
        return Conflict(message, code="already_exists")
    if kind == "busy":
        return Conflict(message, code="busy")
    if kind == "permission_denied":
        return Forbidden(message, code="permission_denied")
    if kind == "invalid":
        return BadRequest(message, code="invalid_path")
    return Internal(message, code="fs_error")


def _entry(value: Any) -> FsEntry:
    if not isinstance(value, dict):
        raise Internal("the guest's fs reply has a malformed entry", code="agent_error")
    fields = {"name": str, "type": str, "size": int, "mtime_ns": int, "mode": int}
    for key, kind in fields.items():
        item = value.get(key)
        if not isinstance(item, kind) or isinstance(item, bool):
            raise Internal(f"the guest's fs entry has no valid {key!r}", code="agent_error")
    return FsEntry(
        name=value["name"], type=value["type"], size=value["size"], mtime_ns=value["mtime_ns"], mode=value["mode"]
    )


def parse_reply(body: bytes) -> Any:
    """
    The ``result`` of a guest reply.

    :raises ServiceError: the guest's error, mapped (see :func:`_error`), or
        :class:`~vmservice.errors.Internal` for a reply that does not parse.
    """
    try:
        reply = json.loads(body)
    except ValueError:
        raise Internal("the guest's fs reply is not JSON", code="agent_error") from None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise Internal("the guest's fs reply is not an fs reply", code="agent_error")
    if not reply["ok"]:
        message = reply.get("message")
        raise _error(reply.get("error"), message if isinstance(message, str) else "file-system operation failed")
    return reply.get("result")


class GuestFileSystem:
    """
    The file system of one guest, through its agent.

    :param agent: the node's agent connection (``Fleet.agent(hostname)``).
    :param limit: largest reply accepted, in bytes.
    """

    def __init__(self, agent: RequestingAgent, limit: int = MAX_FS_REPLY) -> None:
        self._agent = agent
        self._limit = limit

    async def _call(self, header: dict[str, Any]) -> Any:
        try:
            body = await self._agent.request({"op": "fs", **header}, self._limit)
        except AgentUnavailable as e:
            raise AgentNotConnected(f"the agent is not reachable: {e}", code="agent_unavailable") from None
        except AgentRequestFailed as e:
            if e.code == ResetCode.UNKNOWN_OP:
                raise NotSupported(
                    "the guest agent has no file-system operations (image too old)", code="not_supported"
                ) from None
            if e.code is None:
                raise Internal(f"file-system reply refused: {e}", code="reply_too_large") from None
            raise Internal(f"the guest failed the file-system operation: {e}", code="agent_error") from None
        return parse_reply(body)

    async def stat(self, path: str) -> FsEntry:
        """
        Describe ``path`` itself (a symlink is not followed).

        :param path: absolute, or ``~``/``~/...`` for root's home directory.
        """
        return _entry(await self._call({"action": "stat", "path": path}))

    async def readdir(self, path: str) -> list[FsEntry]:
        """
        The entries of directory ``path``, sorted by name, without ``.`` and ``..``.
        """
        result = await self._call({"action": "readdir", "path": path})
        if not isinstance(result, list):
            raise Internal("the guest's readdir reply is not a list", code="agent_error")
        return [_entry(item) for item in result]

    async def mkdir(self, path: str, *, recursive: bool = False, mode: int = 0o755) -> FsEntry:
        """
        Make directory ``path`` with exactly ``mode``; with ``recursive``, make
        missing parents (0755) and accept an existing directory.

        :return: the directory's entry.
        """
        return _entry(await self._call({"action": "mkdir", "path": path, "recursive": recursive, "mode": mode}))

    async def remove(self, path: str, *, recursive: bool = False) -> FsEntry:
        """
        Remove a file, symlink or empty directory; with ``recursive``, a whole tree.

        :return: the entry as it was before removal.
        """
        return _entry(await self._call({"action": "remove", "path": path, "recursive": recursive}))


__all__ = ["ENTRY_TYPES", "FsEntry", "GuestFileSystem", "MAX_FS_REPLY", "format_mode", "parse_reply"]
