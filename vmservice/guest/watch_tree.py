# -*- test-case-name: tests.guest.test_watching,tests.integration.guest.test_watching -*-
"""
The watched tree of one watch (:class:`Tree`): the paths and, when recursive,
every directory below them, watched as they appear and forgotten as they go;
inotify's events turned into :class:`Report` s of the request's event types.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

from vmservice.guest.filesystem import FsError, error_from_os
from vmservice.guest.inotify import (IN_ATTRIB, IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_IGNORED, IN_ISDIR, IN_MODIFY,
                                     IN_MOVE_SELF, IN_MOVED_FROM, IN_MOVED_TO, IN_Q_OVERFLOW,
                                     SUBDIRECTORY_MASK, WATCH_MASK, RawEvent, Watches)

#: The event types a request may ask for.
EVENT_TYPES = ("create", "write", "remove", "rename", "chmod")
#: The type of the event that says events were lost.
OVERFLOW = "overflow"


@dataclass(frozen=True)
class Report:
    """
    One event as the guest reports it.

    :ivar type: one of :data:`EVENT_TYPES`, or :data:`OVERFLOW`.
    :ivar path: the entry's path (``""`` for an overflow).
    :ivar is_dir: whether the entry is a directory.
    :ivar message: why events were lost (overflow only).
    """

    type: str
    path: str
    is_dir: bool = False
    message: Optional[str] = None


@dataclass
class _Watched:
    path: str
    root: bool
    is_dir: bool


class Cancelled(Exception):
    """The stream was reset while the watches were being set up."""


def _limit_message(path: str) -> str:
    return f"{path}: no inotify watch left in the guest (fs.inotify.max_user_watches)"


class Tree:
    """
    The watches of one request on one inotify instance, and what its raw events
    mean: :meth:`handle` turns each into :class:`Report`\\ s (keeping the watches
    of a recursive request in step with new, moved and removed directories).

    :param inotify: where watches are added.
    :param recursive: watch directories below the watched ones.
    :param cancelled: polled while a tree is walked; true stops the walk.
    """

    def __init__(self, inotify: Watches, recursive: bool, cancelled: Callable[[], bool] = lambda: False) -> None:
        self._inotify = inotify
        self._recursive = recursive
        self._cancelled = cancelled
        self._watched: dict[int, _Watched] = {}
        #: Entries reported as found by a scan, whose own IN_CREATE may still be queued.
        self._scanned: set[str] = set()

    @property
    def count(self) -> int:
        """How many watches are in place."""
        return len(self._watched)

    @property
    def alive(self) -> bool:
        """Whether any of the requested paths is still watched."""
        return any(watched.root for watched in self._watched.values())

    def paths(self) -> list[str]:
        """The watched paths, sorted (for tests and logs)."""
        return sorted(watched.path for watched in self._watched.values())

    def add_root(self, path: str) -> None:
        """
        Watch ``path`` (following a symlink, as the caller named it) and, for a
        recursive request, every directory below it.

        :raises FsError: ``path`` does not exist (``not_found``), cannot be
            watched, or no watch is left (``io_error``).
        """
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
            wd = self._inotify.add_watch(path, WATCH_MASK)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise FsError("io_error", _limit_message(path)) from None
            raise error_from_os(e, path) from None
        if wd not in self._watched or not self._watched[wd].root:
            self._watched[wd] = _Watched(path, True, is_dir)
        if is_dir and self._recursive:
            self._add_subtree(path, None, strict=True)

    def _watch_directory(self, path: str, reports: Optional[list[Report]], strict: bool) -> bool:
        """
        Watch directory ``path`` (found below a watched one); whether it is
        watched now.  A directory that vanished or cannot be read is skipped.

        :param strict: no watch left is an :class:`FsError` (while setting up)
            rather than an ``overflow`` report.
        """
        try:
            wd = self._inotify.add_watch(path, SUBDIRECTORY_MASK)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                if strict:
                    raise FsError("io_error", _limit_message(path)) from None
                if reports is not None:
                    reports.append(Report(OVERFLOW, "", False, _limit_message(path) + ": events in it are missed"))
            return False
        if wd not in self._watched:
            self._watched[wd] = _Watched(path, False, True)
        return True

    def _add_subtree(self, top: str, reports: Optional[list[Report]], strict: bool = False) -> None:
        """
        Watch every directory below ``top`` (breadth first, symlinks not
        followed).  With ``reports``, every entry found is reported as
        ``create`` (and remembered, so that its own IN_CREATE, if still queued,
        is not reported twice).
        """
        queue = deque([top])
        while queue:
            if self._cancelled():
                raise Cancelled()
            directory = queue.popleft()
            try:
                with os.scandir(directory) as listing:
                    entries = sorted(listing, key=lambda entry: entry.name)
            except OSError:
                continue
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if reports is not None:
                    reports.append(Report("create", entry.path, is_dir))
                    self._scanned.add(entry.path)
                if is_dir and self._watch_directory(entry.path, reports, strict):
                    queue.append(entry.path)

    def _forget_subtree(self, top: str) -> None:
        """Remove the watches of ``top`` and of everything below it (it moved away)."""
        prefix = top.rstrip("/") + "/"
        for wd, watched in list(self._watched.items()):
            if watched.path == top or watched.path.startswith(prefix):
                del self._watched[wd]
                self._inotify.rm_watch(wd)

    def handle(self, raw: RawEvent) -> list[Report]:
        """What ``raw`` means, as reports (often one, none for bookkeeping, more for a scan)."""
        mask = raw.mask
        if mask & IN_Q_OVERFLOW:
            return [Report(OVERFLOW, "", False, "the guest's inotify queue overflowed "
                                                 "(fs.inotify.max_queued_events): events were lost")]
        if mask & IN_IGNORED:
            self._watched.pop(raw.wd, None)
            return []
        watched = self._watched.get(raw.wd)
        if watched is None:
            return []  # a watch removed meanwhile: what was queued for it is stale
        if raw.name:
            path = os.path.join(watched.path, os.fsdecode(raw.name))
            is_dir = bool(mask & IN_ISDIR)
        elif watched.root:
            path, is_dir = watched.path, watched.is_dir
        else:
            # The watched directory itself, below a watched one: its parent's
            # watch reports the same thing under the entry's name.
            return []
        reports: list[Report] = []
        if mask & (IN_CREATE | IN_MOVED_TO):
            if path in self._scanned:
                self._scanned.discard(path)  # reported by the scan of its new parent
                return []
            reports.append(Report("create", path, is_dir))
            if is_dir and self._recursive and self._watch_directory(path, reports, strict=False):
                self._add_subtree(path, reports if mask & IN_CREATE else None)
            return reports
        self._scanned.discard(path)
        if mask & IN_MODIFY:
            reports.append(Report("write", path, is_dir))
        elif mask & IN_ATTRIB:
            reports.append(Report("chmod", path, is_dir))
        elif mask & (IN_DELETE | IN_DELETE_SELF):
            reports.append(Report("remove", path, is_dir))
        elif mask & (IN_MOVED_FROM | IN_MOVE_SELF):
            reports.append(Report("rename", path, is_dir))
            if not raw.name or (is_dir and self._recursive):
                # Its watches would report under a name that is no longer its
                # own: forget them (IN_MOVED_TO watches it again where it went,
                # if that is inside the tree).
                self._forget_subtree(path)
        return reports

    def drained(self) -> None:
        """
        The inotify queue was read to its end: every IN_CREATE of an entry a
        scan reported has been seen, so the scan's memory can go.
        """
        self._scanned.clear()


__all__ = ["EVENT_TYPES", "OVERFLOW", "Cancelled", "Report", "Tree"]
