# -*- test-case-name: tests.guest.test_watching,tests.integration.guest.test_watching -*-
"""
``{"op": "watch"}``: file-system events of the guest, streamed to the host as
they happen, through inotify (reached with :mod:`ctypes`: the standard library
has no binding).

The host opens the stream with a header such as::

    {"op": "watch", "paths": ["/srv/app"], "patterns": ["*.py"],
     "events": ["create", "write"], "recursive": true, "debounce": 0.2, "uid": 0}

and half-closes it.  The guest answers with *messages*
(:mod:`vmservice.wire.messages`: ``length u32 | JSON object``):

- first the reply: ``{"ok": true, "result": {"paths": [...], "watches": N}}``
  once every path is watched (so nothing that happens after it is missed), or
  ``{"ok": false, "error": KIND, "message": TEXT}`` (the kinds of
  :mod:`vmservice.guest.filesystem`: a missing path is ``not_found``) followed by
  HALF_CLOSE;
- then one message per event: ``{"type", "path", "size", "is_dir"}`` and, for
  ``overflow``, ``"message"``.

Events (inotify's masks):

- ``create``: ``IN_CREATE``, ``IN_MOVED_TO`` (the new name of a rename);
- ``write``: ``IN_MODIFY`` (each write; ``IN_CLOSE_WRITE`` is not reported);
- ``remove``: ``IN_DELETE``, ``IN_DELETE_SELF`` (of a watched path itself);
- ``rename``: ``IN_MOVED_FROM`` (the old name), ``IN_MOVE_SELF`` (a watched path itself);
- ``chmod``: ``IN_ATTRIB`` (mode, owner, times, links);
- ``overflow``: events were lost, ``message`` says why: the kernel's queue
  overflowed (``IN_Q_OVERFLOW``), the host did not take events fast enough (more
  than :data:`PENDING_HIGH_WATER` bytes waited: events are dropped, then counted
  in one ``overflow`` once the host caught up), or a new directory could not be
  watched.  Never filtered out.

``patterns`` are :func:`fnmatch.fnmatchcase` globs on the *base name* of the
event's path (``*.py`` matches ``/srv/app/x/y.py``); none means every name.
``events`` keeps only those types; none means all.  ``recursive`` watches every
directory below a watched directory (symlinks are not followed), and each
directory made later as it appears; the entries already inside a new directory
when its watch is in place (made between the ``mkdir`` and the watch) are
reported as ``create`` too, once.  ``debounce`` (seconds) coalesces the events
of the same type and path: the first one opens a window, those within it are
merged into it, and one event is sent at the window's end.  ``size`` is the
entry's ``st_size`` when the event is sent (0 for ``remove``, ``rename``, and an
entry already gone).  ``~`` in ``paths`` is the home directory of ``uid`` (root
when absent) from ``/etc/passwd``; the agent reads as root whatever ``uid`` is.

A watched path that is removed or renamed is reported, then no longer watched;
when no path is left, the agent half-closes the stream.  A reset of the stream
(the HTTP client went away) removes every watch and closes the inotify
descriptor at once.  The watches are set up on a thread (a recursive watch of a
large tree takes a while under TCG) that wakes the agent's loop through a pipe.

Standard library only: it runs inside the guest.
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import os
import stat
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol

from vmservice.guest.loop import Timer
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.guest.exec_spec import passwd_entry
from vmservice.guest.filesystem import FsError, display_name, error_from_os, resolve_path
from vmservice.wire.errors import ResetCode
from vmservice.wire.messages import encode_message

# -- inotify -----------------------------------------------------------------------------

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

#: What every watch asks for.
WATCH_MASK = (
    IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
)
#: Watches of directories found below a watched one: never through a symlink.
SUBDIRECTORY_MASK = WATCH_MASK | IN_ONLYDIR | IN_DONT_FOLLOW

#: The event types a request may ask for.
EVENT_TYPES = ("create", "write", "remove", "rename", "chmod")
#: The type of the event that says events were lost.
OVERFLOW = "overflow"

#: ``struct inotify_event``: wd, mask, cookie, len (native layout), then the name.
_EVENT = struct.Struct("=iIII")
#: Bytes asked for per read (whole events only; the largest is 16 + NAME_MAX + 1).
READ_SIZE = 64 * 1024
#: Most reads per wake-up, so that other streams get their turn.
MAX_READS_PER_WAKEUP = 4
#: Events are dropped (and counted in an ``overflow``) while this many bytes wait
#: for the host's credit ...
PENDING_HIGH_WATER = 256 * 1024
#: ... until the backlog falls below this.
PENDING_LOW_WATER = 64 * 1024
#: Most (type, path) pairs a debounce window holds; beyond, events go out uncoalesced.
MAX_DEBOUNCED = 10_000
#: The longest debounce window accepted, in seconds.
MAX_DEBOUNCE = 3600.0


@dataclass(frozen=True)
class RawEvent:
    """
    One ``struct inotify_event``.

    :ivar wd: the watch descriptor it happened on.
    :ivar mask: what happened (``IN_*`` bits).
    :ivar cookie: ties the two halves of a rename together.
    :ivar name: the entry's name in the watched directory, ``b""`` for the
        watched path itself.
    """

    wd: int
    mask: int
    cookie: int
    name: bytes


def parse_events(data: bytes) -> list[RawEvent]:
    """
    The events in ``data``, what one ``read`` of an inotify descriptor returned
    (the kernel hands out whole events only).  The name's NUL padding is removed.

    :raises ValueError: ``data`` ends inside an event.
    """
    events = []
    offset = 0
    while offset < len(data):
        if offset + _EVENT.size > len(data):
            raise ValueError("truncated inotify event header")
        wd, mask, cookie, length = _EVENT.unpack_from(data, offset)
        start = offset + _EVENT.size
        end = start + length
        if end > len(data):
            raise ValueError("truncated inotify event name")
        name = bytes(data[start:end]).split(b"\0", 1)[0]
        events.append(RawEvent(wd, mask, cookie, name))
        offset = end
    return events


def encode_event(event: RawEvent, padding: int = 0) -> bytes:
    """
    ``event`` as the kernel lays it out, its name NUL-terminated and padded with
    ``padding`` more NULs (for tests of :func:`parse_events`).
    """
    name = event.name + b"\0" * (padding + 1) if event.name or padding else b""
    return _EVENT.pack(event.wd, event.mask, event.cookie, len(name)) + name


_libc: Optional[ctypes.CDLL] = None


def _c_library() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        library = ctypes.CDLL(None, use_errno=True)
        library.inotify_init1.argtypes = [ctypes.c_int]
        library.inotify_init1.restype = ctypes.c_int
        library.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        library.inotify_add_watch.restype = ctypes.c_int
        library.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        library.inotify_rm_watch.restype = ctypes.c_int
        _libc = library
    return _libc


def _errno_error(path: Optional[str] = None) -> OSError:
    number = ctypes.get_errno()
    return OSError(number, os.strerror(number), path) if path is not None else OSError(number, os.strerror(number))


class Inotify:
    """
    One inotify instance (non-blocking, close-on-exec), through the C library.

    :ivar fd: its descriptor, ``-1`` once closed.
    :raises OSError: the kernel refused a new instance (EMFILE: too many).
    """

    def __init__(self) -> None:
        self._c = _c_library()
        fd = self._c.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise _errno_error()
        self.fd: int = fd

    def add_watch(self, path: str, mask: int) -> int:
        """
        Watch ``path`` for ``mask``; the watch descriptor (the same one again for
        an inode already watched).

        :raises OSError: with the errno of ``inotify_add_watch``.
        """
        wd = self._c.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            raise _errno_error(path)
        return int(wd)

    def rm_watch(self, wd: int) -> None:
        """Stop watch ``wd`` (a watch the kernel dropped already is no error)."""
        if self.fd >= 0:
            self._c.inotify_rm_watch(self.fd, wd)

    def read(self) -> Optional[list[RawEvent]]:
        """The events waiting, or ``None`` when there are none (EAGAIN)."""
        try:
            data = os.read(self.fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return None
        return parse_events(data)

    def close(self) -> None:
        """Close the descriptor: the kernel drops every watch."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


class Watches(Protocol):
    """What :class:`Tree` needs of an inotify instance (tests use a fake)."""

    def add_watch(self, path: str, mask: int) -> int:
        """Watch ``path``; its descriptor."""

    def rm_watch(self, wd: int) -> None:
        """Stop watch ``wd``."""


# -- the watched tree ---------------------------------------------------------------------


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


class _Cancelled(Exception):
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
                raise _Cancelled()
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


# -- filtering and coalescing ------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """
    Which reports a request wants.

    :ivar events: the types kept; empty for all.
    :ivar patterns: globs on the base name; empty for every name.
    """

    events: frozenset[str] = frozenset()
    patterns: tuple[str, ...] = ()

    def wants(self, report: Report) -> bool:
        """Whether ``report`` is sent (an overflow always is)."""
        if report.type == OVERFLOW:
            return True
        if self.events and report.type not in self.events:
            return False
        if not self.patterns:
            return True
        name = os.path.basename(report.path.rstrip("/")) or report.path
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)


class Debouncer:
    """
    Coalesces reports of the same type and path within ``window`` seconds: the
    first opens the window, the others are merged into it (the latest wins), one
    goes to ``send`` when the window closes.  Reports leave in the order their
    windows opened.  With no window, or for an overflow, or once
    :data:`MAX_DEBOUNCED` windows are open, reports go out at once.

    :param window: seconds; 0 for none.
    :param send: where reports go.
    :param clock: monotonic seconds.
    :param call_later: ``(delay, callback) -> Timer``.
    """

    def __init__(
        self,
        window: float,
        send: Callable[[Report], None],
        clock: Callable[[], float],
        call_later: Callable[[float, Callable[[], None]], Timer],
    ) -> None:
        self._window = window
        self._send = send
        self._clock = clock
        self._call_later = call_later
        self._pending: dict[tuple[str, str], Report] = {}
        self._order: deque[tuple[float, tuple[str, str]]] = deque()
        self._timer: Optional[Timer] = None

    def add(self, report: Report) -> None:
        """A report to send (now, or when its window closes)."""
        if self._window <= 0 or report.type == OVERFLOW:
            self._send(report)
            return
        key = (report.type, report.path)
        if key in self._pending:
            self._pending[key] = report
            return
        if len(self._pending) >= MAX_DEBOUNCED:
            self._send(report)
            return
        self._pending[key] = report
        self._order.append((self._clock() + self._window, key))
        if self._timer is None:
            self._timer = self._call_later(self._window, self._due)

    def _due(self) -> None:
        self._timer = None
        now = self._clock()
        while self._order and self._order[0][0] <= now:
            _, key = self._order.popleft()
            self._send(self._pending.pop(key))
        if self._order:
            self._timer = self._call_later(max(0.0, self._order[0][0] - now), self._due)

    def flush(self) -> None:
        """Send every open window's report now."""
        self.close()
        while self._order:
            _, key = self._order.popleft()
            self._send(self._pending.pop(key))

    def close(self) -> None:
        """Stop the timer (what is pending stays until :meth:`flush`)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# -- the request -------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchSpec:
    """
    What to watch, from the OPEN header (see the module docstring).

    :ivar paths: as the host sent them (absolute, ``~`` or ``~/...``).
    :ivar selection: the types and patterns kept.
    :ivar recursive: watch below the directories too.
    :ivar debounce: the coalescing window in seconds (0: none).
    :ivar uid: whose home ``~`` is.
    """

    paths: tuple[str, ...]
    selection: Selection = Selection()
    recursive: bool = False
    debounce: float = 0.0
    uid: int = 0

    @classmethod
    def from_header(cls, header: Mapping[str, Any]) -> "WatchSpec":
        """
        Read and check the header.

        :raises FsError: ``invalid``, naming the field.
        """

        def strings(name: str) -> tuple[str, ...]:
            value = header.get(name, [])
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise FsError("invalid", f"{name} must be a list of strings")
            return tuple(value)

        paths = strings("paths")
        if not paths:
            raise FsError("invalid", "paths must name at least one path")
        events = strings("events")
        unknown = sorted(set(events) - set(EVENT_TYPES))
        if unknown:
            raise FsError("invalid", f"unknown event types {unknown}: use {', '.join(EVENT_TYPES)}")
        recursive = header.get("recursive", False)
        if not isinstance(recursive, bool):
            raise FsError("invalid", "recursive must be true or false")
        debounce = header.get("debounce", 0)
        if isinstance(debounce, bool) or not isinstance(debounce, (int, float)) or not 0 <= debounce <= MAX_DEBOUNCE:
            raise FsError("invalid", f"debounce must be 0 to {MAX_DEBOUNCE:g} seconds")
        uid = header.get("uid", 0)
        if isinstance(uid, bool) or not isinstance(uid, int) or not 0 <= uid < 2**32:
            raise FsError("invalid", "uid must be 0 .. 2^32-1")
        patterns = tuple(pattern for pattern in strings("patterns") if pattern)
        return cls(paths, Selection(frozenset(events), patterns), recursive, float(debounce), uid)

    def resolved(self, passwd: str = "/etc/passwd") -> list[str]:
        """
        The absolute paths to watch (``~`` expanded, normalised, duplicates
        dropped).

        :raises FsError: ``invalid`` for a relative path, or ``~`` for a user
            without a home directory.
        """
        user = passwd_entry(self.uid, passwd)
        home = user[1] if user and user[1] else ("/root" if self.uid == 0 else None)

        def find_home() -> str:
            if home is None:
                raise FsError("invalid", f"uid {self.uid} has no home directory: ~ cannot be resolved")
            return home

        found: list[str] = []
        for value in self.paths:
            path = os.path.normpath(resolve_path(value, find_home))
            if path.startswith("//"):
                path = "/" + path.lstrip("/")
            if path not in found:
                found.append(path)
        return found


def set_up(spec: WatchSpec, cancelled: Callable[[], bool] = lambda: False,
           passwd: str = "/etc/passwd") -> tuple[Inotify, Tree, list[str]]:
    """
    A new inotify instance watching what ``spec`` asks for, its tree, and the
    resolved paths.

    :raises FsError: a path is missing or cannot be watched (the instance is closed).
    :raises _Cancelled: ``cancelled`` turned true meanwhile.
    """
    paths = spec.resolved(passwd)
    try:
        inotify = Inotify()
    except OSError as e:
        kind = "busy" if e.errno == errno.EMFILE else "io_error"
        raise FsError(kind, f"cannot watch: {e.strerror or e} (fs.inotify.max_user_instances)") from None
    tree = Tree(inotify, spec.recursive, cancelled)
    try:
        for path in paths:
            tree.add_root(path)
    except BaseException:
        inotify.close()
        raise
    return inotify, tree, paths


class WatchHandler(StreamHandler):
    """
    Serves ``{"op": "watch", ...}`` (see the module docstring).  Data from the
    host is ignored (acknowledged); the host's half-close changes nothing.
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._cancelled = False
        self._finished = False
        self._inotify: Optional[Inotify] = None
        self._tree: Optional[Tree] = None
        self._setup: Optional[tuple[Inotify, Tree, list[str]]] = None
        self._setup_error: Optional[FsError] = None
        self._setup_failure: Optional[str] = None
        self._spec: Optional[WatchSpec] = None
        self._debouncer: Optional[Debouncer] = None
        self._dropped = 0
        self._wake_r = -1
        self._wake_w = -1

    # -- StreamHandler ---------------------------------------------------------------

    def start(self) -> None:
        try:
            self._spec = WatchSpec.from_header(self.header)
        except FsError as e:
            self._refuse(e)
            return
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.stream.loop.watch(self._wake_r, self._set_up_done)
        worker = threading.Thread(target=self._set_up, name=f"watch-{self.stream.stream_id}", daemon=True)
        worker.start()

    def flushed(self) -> None:
        if self._dropped and self.stream.pending < PENDING_LOW_WATER:
            self._report_dropped()

    def _report_dropped(self) -> None:
        count, self._dropped = self._dropped, 0
        self._write(Report(OVERFLOW, "", False, f"{count} events were dropped: the host did not take them fast enough"))

    def reset(self, code: int, reason: str) -> None:
        # The worker notices between directories; its wake-up closes the pipe
        # and whatever it made.
        self._cancelled = True
        self._close()

    # -- setting up, on a thread -------------------------------------------------------

    def _set_up(self) -> None:
        assert self._spec is not None
        try:
            self._setup = set_up(self._spec, lambda: self._cancelled)
        except _Cancelled:
            pass
        except FsError as e:
            self._setup_error = e
        except Exception as e:  # a bug, not a refusal: reset the stream
            self._setup_failure = repr(e)[:200]
        finally:
            os.write(self._wake_w, b"x")

    def _set_up_done(self) -> None:
        self.stream.loop.watch(self._wake_r)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1
        setup, self._setup = self._setup, None
        if self._cancelled:
            if setup is not None:
                setup[0].close()
            return
        if self._setup_error is not None:
            self._refuse(self._setup_error)
            return
        if setup is None:
            self.stream.reset(ResetCode.INTERNAL_ERROR, self._setup_failure or "watch failed")
            return
        assert self._spec is not None
        self._inotify, self._tree, paths = setup
        self._debouncer = Debouncer(self._spec.debounce, self._send, time.monotonic,
                                    lambda delay, callback: self.stream.loop.call_later(delay, self._guarded(callback)))
        self.stream.write(encode_message({"ok": True, "result": {"paths": [display_name(p) for p in paths],
                                                                 "watches": self._tree.count}}))
        self.stream.loop.watch(self._inotify.fd, self._guarded(self._readable))

    def _guarded(self, callback: Callable[[], None]) -> Callable[[], None]:
        """
        ``callback`` for the agent's loop, which runs it outside any handler
        call: a failure resets this stream only, never the agent.
        """

        def run() -> None:
            try:
                callback()
            except Exception as e:
                self._finished = True
                self._close()
                self.stream.reset(ResetCode.INTERNAL_ERROR, f"watch failed: {e!r}"[:200])

        return run

    def _refuse(self, error: FsError) -> None:
        self._finished = True
        self.stream.write(encode_message({"ok": False, "error": error.kind, "message": error.message}))
        self.stream.end()

    # -- events ------------------------------------------------------------------------

    def _readable(self) -> None:
        inotify, tree, spec, debouncer = self._inotify, self._tree, self._spec, self._debouncer
        if inotify is None or tree is None or spec is None or debouncer is None:
            return
        for _ in range(MAX_READS_PER_WAKEUP):
            events = inotify.read()
            if events is None:
                tree.drained()
                break
            for raw in events:
                for report in tree.handle(raw):
                    if spec.selection.wants(report):
                        debouncer.add(report)
        if not tree.alive and not self._finished:
            self._finished = True
            debouncer.flush()
            self._close()
            if self._dropped:
                self._report_dropped()  # the last message: the count is not lost with the stream
            self.stream.end()

    def _send(self, report: Report) -> None:
        if self._dropped or self.stream.pending >= PENDING_HIGH_WATER:
            self._dropped += 1
            return
        self._write(report)

    def _write(self, report: Report) -> None:
        size = 0
        if report.path and report.type not in ("remove", "rename"):
            try:
                size = os.lstat(report.path).st_size
            except OSError:
                pass
        message: dict[str, Any] = {"type": report.type, "path": display_name(report.path), "size": size,
                                   "is_dir": report.is_dir}
        if report.message is not None:
            message["message"] = report.message
        self.stream.write(encode_message(message))

    def _close(self) -> None:
        if self._debouncer is not None:
            self._debouncer.close()
        inotify, self._inotify = self._inotify, None
        if inotify is not None:
            self.stream.loop.watch(inotify.fd)
            inotify.close()


__all__ = [
    "Debouncer",
    "EVENT_TYPES",
    "Inotify",
    "OVERFLOW",
    "RawEvent",
    "Report",
    "Selection",
    "Tree",
    "WatchHandler",
    "WatchSpec",
    "encode_event",
    "parse_events",
    "set_up",
]
