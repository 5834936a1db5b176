# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
A node's file system (``/vm/{hostname}/fs/...``): list, stat, make and remove.
"""

from __future__ import annotations

from typing import Any

from .requests import Requests, _octal, _path

__all__ = ["FilesystemCalls"]


class FilesystemCalls(Requests):
    """
    The file-system operations of a node (watching is in :mod:`vmservice.client.watching`).
    """

    async def readdir(self, hostname: str, path: str) -> list[dict[str, Any]]:
        """
        The entries of directory ``path`` in the guest, sorted by name: FsEntry
        objects (``name``, ``type``, ``size``, ``mtime`` RFC 3339, ``mode``
        octal text).
        """
        result: list[dict[str, Any]] = await self._json("GET", _path("vm", hostname, "fs", "readdir"), {"path": path})
        return result

    async def stat(self, hostname: str, path: str) -> dict[str, Any]:
        """The FsEntry of ``path`` (a symlink is not followed); 404 ApiError when missing."""
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "fs", "stat"), {"path": path})
        return result

    async def mkdir(
        self, hostname: str, path: str, *, recursive: bool = False, mode: int | str | None = None
    ) -> dict[str, Any]:
        """
        Make directory ``path`` (with its parents when ``recursive``, like
        ``mkdir -p``), with ``mode`` (the daemon's default ``0755``); answers
        its FsEntry.
        """
        body: dict[str, Any] = {"path": path}
        if recursive:
            body["recursive"] = True
        if mode is not None:
            body["mode"] = _octal(mode)
        result: dict[str, Any] = await self._json("POST", _path("vm", hostname, "fs", "mkdir"), json=body)
        return result

    async def remove(self, hostname: str, path: str, *, recursive: bool = False) -> dict[str, Any]:
        """
        Remove ``path`` (a directory's contents too when ``recursive``; a
        non-empty directory without it is a 409 ApiError); answers the
        FsEntry as it was.
        """
        result: dict[str, Any] = await self._json(
            "DELETE", _path("vm", hostname, "fs", "remove"), {"path": path, "recursive": recursive or None}
        )
        return result
