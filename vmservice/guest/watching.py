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

Its parts: :mod:`vmservice.guest.inotify` (the kernel's interface),
:mod:`vmservice.guest.watch_tree` (the watched tree and its reports) and
:mod:`vmservice.guest.watch_coalescing` (selection and debounce).

Standard library only: it runs inside the guest.
"""
from __future__ import annotations

import errno
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from vmservice.guest.exec_spec import passwd_entry
from vmservice.guest.filesystem import FsError, display_name, resolve_path
from vmservice.guest.inotify import Inotify
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.guest.watch_coalescing import Debouncer, Selection
from vmservice.guest.watch_tree import OVERFLOW, Cancelled, Report, Tree
from vmservice.wire.errors import ResetCode
from vmservice.wire.messages import encode_message
from vmservice.wire.openheaders.fields import BadHeader
from vmservice.wire.openheaders.watch import MAX_DEBOUNCE, WatchHeader

#: Most reads per wake-up, so that other streams get their turn.
MAX_READS_PER_WAKEUP = 4
#: Events are dropped (and counted in an ``overflow``) while this many bytes wait
#: for the host's credit ...
PENDING_HIGH_WATER = 256 * 1024
#: ... until the backlog falls below this.
PENDING_LOW_WATER = 64 * 1024


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
        Read and check the header (:class:`~vmservice.wire.openheaders.watch.WatchHeader`).

        :raises FsError: ``invalid``, naming the field.
        """
        try:
            read = WatchHeader.from_json(header)
        except BadHeader as e:
            raise FsError("invalid", str(e)) from None
        patterns = tuple(pattern for pattern in read.patterns if pattern)
        return cls(read.paths, Selection(frozenset(read.events), patterns), read.recursive, read.debounce, read.uid)

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
    :raises Cancelled: ``cancelled`` turned true meanwhile.
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
        except Cancelled:
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


__all__ = ["MAX_DEBOUNCE", "PENDING_HIGH_WATER", "PENDING_LOW_WATER", "WatchHandler", "WatchSpec", "set_up"]
