# -*- test-case-name: tests.guest.test_filesystem,tests.integration.guest.test_filesystem -*-
"""
The ``fs`` operation's streams (see :mod:`vmservice.guest.filesystem`): a
request's header carried out (:func:`perform`) on a thread, its reply written,
then HALF_CLOSE.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable, Mapping, Optional

from vmservice.guest.filesystem import (Cancelled, FsError, do_mkdir, do_readdir, do_remove, do_stat, error_from_os,
                                        resolve_path, root_home)
from vmservice.guest.filesystem_details import (detailed_readdir, detailed_stat, do_mkdir_owned, do_rename,
                                                do_setmeta)
from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.wire.errors import ResetCode
from vmservice.wire.openheaders.fields import BadHeader
from vmservice.wire.openheaders.fs import FsHeader


def perform(
    header: Mapping[str, Any],
    cancelled: Callable[[], bool] = lambda: False,
    home: Callable[[], str] = root_home,
) -> dict[str, Any]:
    """
    Carry out the request of an ``fs`` OPEN header (read as an
    :class:`~vmservice.wire.openheaders.fs.FsHeader`) and return the reply object.

    Never raises for a file-system failure or a bad header: both become
    ``{"ok": false, ...}`` (a bad header is ``invalid``, with the field named).

    :param cancelled: polled during long work; true stops it.
    :param home: root's home directory, for ``~``.
    """
    try:
        try:
            request = FsHeader.from_json(header)
        except BadHeader as e:
            raise FsError("invalid", str(e)) from None
        path = resolve_path(request.path, home)
        result = _carry_out(request, path, cancelled, home)
    except FsError as e:
        return {"ok": False, "error": e.kind, "message": e.message}
    except OSError as e:
        failed = error_from_os(e, getattr(e, "filename", None) or str(header.get("path")))
        return {"ok": False, "error": failed.kind, "message": failed.message}
    return {"ok": True, "result": result}


def _carry_out(request: FsHeader, path: str, cancelled: Callable[[], bool], home: Callable[[], str]) -> Any:
    """The result of ``request`` on ``path`` (already resolved)."""
    owned = request.uid is not None or request.gid is not None
    if request.action == "stat":
        return detailed_stat(path) if request.details else do_stat(path)
    if request.action == "readdir":
        return detailed_readdir(path, cancelled) if request.details else do_readdir(path, cancelled)
    if request.action == "mkdir" and owned:
        return do_mkdir_owned(path, request.mode, request.uid, request.gid)
    if request.action == "mkdir":
        entry = do_mkdir(path, request.recursive, request.mode)
        return detailed_stat(path) if request.details else entry
    if request.action == "rename":
        return do_rename(path, resolve_path(request.destination, home), request.uid, request.gid)
    if request.action == "setmeta":
        return do_setmeta(path, request.metadata)
    return do_remove(path, request.recursive, cancelled)


class FsHandler(StreamHandler):
    """
    ``{"op": "fs", ...}``: runs :func:`perform` on a thread, writes its reply, then
    half-closes.  Data from the host is ignored (acknowledged).
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._cancelled = False
        self._reply: Optional[dict[str, Any]] = None
        self._failure: Optional[str] = None
        self._wake_r = -1
        self._wake_w = -1

    def start(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.stream.loop.watch(self._wake_r, self._finished)
        worker = threading.Thread(target=self._work, name=f"fs-{self.stream.stream_id}", daemon=True)
        worker.start()

    def _work(self) -> None:
        try:
            self._reply = perform(self.header, lambda: self._cancelled)
        except Cancelled:
            self._reply = None
        except Exception as e:  # a bug, not a file-system failure: reset the stream
            self._failure = repr(e)[:200]
        finally:
            os.write(self._wake_w, b"x")

    def _close_pipe(self) -> None:
        self.stream.loop.watch(self._wake_r)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    def _finished(self) -> None:
        self._close_pipe()
        reply = self._reply
        if self._cancelled:
            return
        if reply is None:
            self.stream.reset(ResetCode.INTERNAL_ERROR, self._failure or "fs operation failed")
            return
        self.stream.write(json.dumps(reply, separators=(",", ":")).encode("utf-8"))
        self.stream.end()

    def reset(self, code: int, reason: str) -> None:
        # The worker notices between entries; its wake-up still closes the pipe.
        self._cancelled = True


__all__ = ["FsHandler", "perform"]
