# -*- test-case-name: tests.guest.test_filesystem,tests.integration.guest.test_filesystem -*-
"""
The guest's file-system operations: ``{"op": "fs", "action": ...}`` streams.

One stream per request.  The host opens the stream with a header such as
``{"op": "fs", "action": "readdir", "path": "/etc"}`` (an
:class:`~vmservice.wire.openheaders.fs.FsHeader`) and half-closes it; the agent
answers one JSON object and half-closes in turn:

- ``{"ok": true, "result": ...}``: an entry (``stat``, ``mkdir``, ``remove``) or a
  list of entries sorted by name (``readdir``);
- ``{"ok": false, "error": KIND, "message": TEXT}`` with KIND one of
  :data:`ERROR_KINDS`.

An entry is ``{"name", "type", "size", "mtime_ns", "mode"}``: ``mode`` is the
integer of the permission bits *including* setuid, setgid and sticky
(``st_mode & 0o7777``), ``mtime_ns`` integer nanoseconds since the Unix epoch.  The
host turns them into the API's text forms (``"0644"``, RFC 3339), so the guest stays
free of presentation.

The work runs on a thread of its own (a large ``readdir`` or a recursive ``remove``
may take seconds under TCG) and wakes the agent's loop through a pipe when done, so
other streams keep moving meanwhile.  A reset of the stream stops a recursive
removal between two entries.

Standard library only, and cheap to import: it runs inside the guest.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Callable

from vmservice.wire.openheaders.copy import checked_path
from vmservice.wire.openheaders.fields import BadHeader
from vmservice.wire.openheaders.fs import DEFAULT_DIRECTORY_MODE


#: Every ``error`` kind a reply may carry.
ERROR_KINDS = (
    "not_found",
    "not_a_directory",
    "not_empty",
    "exists",
    "permission_denied",
    "invalid",
    "busy",
    "io_error",
)

_ERRNO_KINDS = {
    errno.ENOENT: "not_found",
    errno.ENOTDIR: "not_a_directory",
    errno.ENOTEMPTY: "not_empty",
    errno.EEXIST: "exists",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.EROFS: "permission_denied",
    errno.ENAMETOOLONG: "invalid",
    errno.ELOOP: "invalid",
    errno.EINVAL: "invalid",
    errno.EBUSY: "busy",
}


class FsError(Exception):
    """
    A failure reported to the host as ``{"ok": false, ...}``.

    :ivar kind: one of :data:`ERROR_KINDS`.
    :ivar message: a sentence for a person.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Cancelled(Exception):
    """The stream was reset while the work ran."""


def error_from_os(error: OSError, path: str) -> FsError:
    """
    The :class:`FsError` for an ``OSError`` met while working on ``path``.
    """
    kind = _ERRNO_KINDS.get(error.errno or 0, "io_error")
    reason = error.strerror or str(error)
    return FsError(kind, f"{path}: {reason}")


def file_type(mode: int) -> str:
    """
    The entry type for ``st_mode``: ``file``, ``directory`` and ``symlink`` as the
    API documents them, and ``char_device``, ``block_device``, ``fifo``, ``socket``
    for the rest (``other`` should the kernel ever report something else).
    """
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISCHR(mode):
        return "char_device"
    if stat.S_ISBLK(mode):
        return "block_device"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "other"


def display_name(name: str) -> str:
    """
    ``name`` (as :mod:`os` decodes it, with surrogate escapes for bytes that are not
    UTF-8) as valid text: undecodable bytes become U+FFFD, because JSON clients
    reject lone surrogates.
    """
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def describe(name: str, status: os.stat_result) -> dict[str, Any]:
    """
    The reply entry for ``name`` with (``lstat``) status ``status``.
    """
    return {
        "name": display_name(name),
        "type": file_type(status.st_mode),
        "size": status.st_size,
        "mtime_ns": status.st_mtime_ns,
        "mode": stat.S_IMODE(status.st_mode),
    }


def root_home() -> str:
    """
    The home directory of uid 0 (``~`` in paths): from the password database,
    ``/root`` when it has none.
    """
    try:
        import pwd

        home = pwd.getpwuid(0).pw_dir
    except (ImportError, KeyError):
        return "/root"
    return home or "/root"


def resolve_path(value: object, home: Callable[[], str] = root_home) -> str:
    """
    The absolute path a header's ``path`` names: absolute paths as they are, ``~``
    and ``~/...`` under root's home directory.

    :raises FsError: ``invalid`` for anything else (relative, ``~user``, empty, NUL).
    """
    try:
        path = checked_path(value)
    except BadHeader as e:
        raise FsError("invalid", str(e)) from None
    if path == "~" or path.startswith("~/"):
        return home().rstrip("/") + path[1:] if path != "~" else home()
    return path


def _is_root(path: str) -> bool:
    normal = os.path.normpath(path)
    return normal.strip("/") == ""


def _entry_name(path: str) -> str:
    name = os.path.basename(os.path.normpath(path).rstrip("/"))
    return name or "/"


def _lstat_entry(path: str) -> dict[str, Any]:
    try:
        return describe(_entry_name(path), os.lstat(path))
    except OSError as e:
        raise error_from_os(e, path) from None


def do_stat(path: str) -> dict[str, Any]:
    """
    The entry of ``path`` itself: a symlink is described, not followed.
    """
    return _lstat_entry(path)


def do_readdir(path: str, cancelled: Callable[[], bool] = lambda: False,
               entry: Callable[[str, str, os.stat_result], dict[str, Any]] = lambda path, name, status:
               describe(name, status)) -> list[dict[str, Any]]:
    """
    The entries of directory ``path`` (following a symlink named by ``path``, as
    ``ls`` does), sorted by name, without ``.`` and ``..``; each entry is described
    with ``lstat``, by ``entry(its path, its name, its status)`` (:func:`describe`
    by default).  Entries that vanish while being listed are left out.
    """
    entries = []
    try:
        with os.scandir(path) as listing:
            for found in listing:
                if cancelled():
                    raise Cancelled()
                try:
                    entries.append(entry(found.path, found.name, found.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue
    except OSError as e:
        raise error_from_os(e, path) from None
    entries.sort(key=lambda entry: entry["name"])
    return entries


def missing_directories(path: str, *, itself: str = "not_a_directory") -> list[str]:
    """
    The directories from ``path`` up that do not exist yet, outermost first:
    what ``mkdir -p path`` would make.

    :param itself: the error kind when ``path`` itself exists but is not a
        directory (``not_a_directory`` is used for its ancestors).
    :raises FsError: something on the way is not a directory, or cannot be
        looked at.
    """
    missing = []
    target = current = os.path.normpath(path)
    while True:
        try:
            status = os.stat(current)
        except FileNotFoundError:
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
            continue
        except OSError as e:
            raise error_from_os(e, current) from None
        if not stat.S_ISDIR(status.st_mode):
            kind = itself if current == target else "not_a_directory"
            raise FsError(kind, f"{current}: exists and is not a directory")
        break
    missing.reverse()
    return missing


def do_mkdir(path: str, recursive: bool, mode: int) -> dict[str, Any]:
    """
    Make directory ``path`` with exactly ``mode`` (``chmod`` after ``mkdir``, so the
    umask does not strip bits).

    Without ``recursive`` the parent must exist and ``path`` must not.  With it,
    missing parents are made with mode 0755 and an existing *directory* is success
    (its mode is left alone), as ``mkdir -p`` does; an existing non-directory is
    still ``exists``.
    """
    if not recursive:
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, mode)
        except OSError as e:
            raise error_from_os(e, path) from None
        return _lstat_entry(path)
    missing = missing_directories(path, itself="exists")
    for index, directory in enumerate(missing):
        final = index == len(missing) - 1
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise FsError("exists", f"{directory}: exists and is not a directory") from None
            continue
        except OSError as e:
            raise error_from_os(e, directory) from None
        try:
            os.chmod(directory, mode if final else DEFAULT_DIRECTORY_MODE)
        except OSError as e:
            raise error_from_os(e, directory) from None
    return _lstat_entry(path)


def _remove_tree(path: str, cancelled: Callable[[], bool]) -> None:
    """
    Remove directory ``path`` and everything under it, depth first, without
    following symlinks and without recursion (trees may be deep).
    """
    stack = [(path, False)]
    while stack:
        directory, emptied = stack.pop()
        if cancelled():
            raise Cancelled()
        if emptied:
            os.rmdir(directory)
            continue
        stack.append((directory, True))
        with os.scandir(directory) as listing:
            for found in listing:
                if found.is_dir(follow_symlinks=False):
                    stack.append((found.path, False))
                else:
                    os.unlink(found.path)


def do_remove(path: str, recursive: bool, cancelled: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """
    Remove ``path``: a file or symlink (never its target), an empty directory, or
    with ``recursive`` a whole tree.  ``/`` is refused as ``invalid``.

    :return: the entry as it was before removal.
    """
    if _is_root(path):
        raise FsError("invalid", "refusing to remove /")
    entry = _lstat_entry(path)
    try:
        if entry["type"] != "directory":
            os.unlink(path)
        elif recursive:
            _remove_tree(path, cancelled)
        else:
            os.rmdir(path)
    except OSError as e:
        if e.errno == errno.EEXIST:  # some file systems say so for a non-empty rmdir
            raise FsError("not_empty", f"{path}: directory not empty") from None
        raise error_from_os(e, getattr(e, "filename", None) or path) from None
    return entry


__all__ = [
    "ERROR_KINDS",
    "FsError",
    "Cancelled",
    "describe",
    "display_name",
    "do_mkdir",
    "do_readdir",
    "do_remove",
    "do_stat",
    "file_type",
    "resolve_path",
]
