# -*- test-case-name: tests.api.test_filesystem -*-
"""
File-system operations in a guest: ``/vm/{hostname}/fs/{readdir,stat,mkdir,remove}``.

Thin handlers: parse, ask the node's guest (:class:`~vmservice.guestport.guest.IGuest`),
render FsEntry records.  The guest's errors are mapped by the one table,
:data:`vmservice.errors.GUEST_ERRORS`.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Optional

from attrs import frozen
from twisted.web.iweb import IRequest

from ..buffer_budget import BufferBudget
from ..guestport.files import FsEntry as GuestEntry
from ..nodes.fleet import Fleet
from .inputs.filesystem import fs_mkdir_request
from .models.files import FsEntry, FsMkdirRequest
from .models.meta import ErrorResponse
from .query import GUEST_PATH, Boolean, NoQuery, param
from .paced_body import write_within
from .rendering import format_mode, json_body
from .routing import Reply, Route

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_PATH = "Absolute path in the guest; ~ and ~/... name root's home directory"


@frozen
class PathQuery:
    """A path in the guest."""

    path: str = param(GUEST_PATH, _PATH, required=True)


@frozen
class RemoveQuery:
    """A path in the guest to remove."""

    path: str = param(GUEST_PATH, _PATH, required=True)
    recursive: bool = param(Boolean(), "Remove a directory and everything under it", default=False)


def rfc3339_ns(nanoseconds: int) -> str:
    """
    Integer nanoseconds since the Unix epoch as RFC 3339 in UTC, with as many
    fraction digits as needed (none for whole seconds, at most nine):
    ``2024-05-01T12:00:00.5Z``.
    """
    seconds, fraction = divmod(nanoseconds, 1_000_000_000)
    try:
        moment = _EPOCH + timedelta(seconds=seconds)
    except OverflowError:  # outside years 1..9999: clamp rather than fail the listing
        moment, fraction = (datetime.max if seconds > 0 else datetime.min).replace(microsecond=0), 0
    text = f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%S")
    if fraction:
        text += "." + f"{fraction:09d}".rstrip("0")
    return text + "Z"


def fs_entry(entry: GuestEntry) -> FsEntry:
    """The API's FsEntry for a guest entry."""
    return FsEntry(
        name=entry.name, type=entry.type, size=entry.size, mtime=rfc3339_ns(entry.mtime_ns), mode=format_mode(entry.mode)
    )


def _errors(*extra: tuple[int, str]) -> dict[int, Reply]:
    replies = {
        400: Reply("Missing, relative or invalid path, bad boolean or mode", ErrorResponse),
        404: Reply("No such VM, or no such path in the guest", ErrorResponse),
        409: Reply("The VM is paused, stopped or suspended", ErrorResponse),
        503: Reply("The VM's agent is not connected", ErrorResponse),
    }
    for status, text in extra:
        replies[status] = Reply(text, ErrorResponse)
    return replies


class FilesystemApi:
    """
    :param fleet: the nodes of this daemon.
    :param budget: what a directory listing's answer is held in while it is
        written (it may be as large as the guest's 32 MiB reply); ``None``: no bound.
    """

    def __init__(self, fleet: Fleet, budget: Optional[BufferBudget] = None) -> None:
        self._fleet = fleet
        self._budget = budget

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/vm/{hostname}/fs/readdir", self.readdir, "List a directory in the guest", "fs",
                  {200: Reply("The entries, sorted by name", FsEntry, array=True),
                   **_errors((400, "Missing or relative path, or the path is not a directory"))},
                  query=PathQuery),
            Route("GET", "/vm/{hostname}/fs/stat", self.stat, "Describe a path in the guest (lstat)", "fs",
                  {200: Reply("The entry; a symlink is described, not followed", FsEntry), **_errors()},
                  query=PathQuery),
            Route("POST", "/vm/{hostname}/fs/mkdir", self.mkdir, "Make a directory in the guest", "fs",
                  {200: Reply("The directory's entry", FsEntry),
                   **_errors((409, "The path exists (without recursive, or it is not a directory), or the VM is paused"))},
                  body=FsMkdirRequest),
            Route("DELETE", "/vm/{hostname}/fs/remove", self.remove, "Remove a path in the guest", "fs",
                  {200: Reply("The removed entry, as it was", FsEntry),
                   **_errors((400, "Missing or relative path, or the path is /"),
                             (409, "A non-empty directory without recursive, or the VM is paused"))},
                  query=RemoveQuery),
        ]

    async def readdir(self, request: IRequest, query: PathQuery, hostname: str) -> bytes:
        entries = await (await self._fleet.guest(hostname)).readdir(query.path)
        answer = json_body(request, [fs_entry(entry) for entry in entries])
        return await write_within(request, answer, self._budget, "a directory listing")

    async def stat(self, request: IRequest, query: PathQuery, hostname: str) -> bytes:
        return json_body(request, fs_entry(await (await self._fleet.guest(hostname)).stat(query.path)))

    async def mkdir(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        path, recursive, mode = fs_mkdir_request(request)
        entry = await (await self._fleet.guest(hostname)).mkdir(path, recursive, mode)
        return json_body(request, fs_entry(entry))

    async def remove(self, request: IRequest, query: RemoveQuery, hostname: str) -> bytes:
        entry = await (await self._fleet.guest(hostname)).remove(query.path, query.recursive)
        return json_body(request, fs_entry(entry))


__all__ = ["FilesystemApi", "fs_entry", "rfc3339_ns"]
