# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
File copy in the guest: ``{"op": "cp-upload"}`` and ``{"op": "cp-download"}`` streams.

**Upload** (host to guest).  OPEN header
``{"op": "cp-upload", "path": P, "mode": "binary"|"tar", "uid": N|null,
"gid": N|null, "permissions": N|null}``, optionally with ``"semantics":
"legacy"|"cp-v1"`` (absent: legacy), ``"source_name": NAME|null``,
``"copy_contents": bool``, ``"exclude": [PATTERN, ...]`` and
``"unpacked_size": N|null``.  ``~`` in ``P`` is the home directory of
``uid`` (from ``/etc/passwd``; root's when ``uid`` is null or unknown).  The host's DATA
is the body (the file, or an uncompressed tar stream) and its HALF_CLOSE ends
it.  The agent answers one JSON object and half-closes: ``{"ok": true,
"result": {"path", "size", "entries"}}`` or ``{"ok": false, "error": KIND,
"message": TEXT}`` (KIND from :data:`ERROR_KINDS`).  An error may come before
the body ended (an unsafe tar entry, no room): the agent then acknowledges
and drops the rest, and the host resets the stream.  Nothing is committed
unless the body ended with HALF_CLOSE: a reset removes the file being written.

``unpacked_size`` (the client's ``X-Slicer-Unpacked-Size``) is checked
before anything is written: the target's file system must have
:func:`space_needed` bytes free, else ``no_space`` (see :func:`check_space`).
A file system that fills up during the copy is ``no_space`` too.

- ``binary``: ``P`` is the file.  It is written beside its final name
  (``.NAME.vmservice-XXXX``), fsynced and renamed over ``P``, so readers see
  the old file or the new one, never a part.  Missing parent directories are
  made with mode 0755 (owned by ``uid``/``gid`` when given).  ``permissions``
  (default: the replaced file's mode, else 0644) and ``uid``/``gid`` (default:
  the replaced file's owner, else the agent's, root) are set on the new file.
  A directory at ``P`` is refused (``is_a_directory``); a symlink at ``P`` is
  replaced, not followed.
- ``tar``: ``P`` is a directory (made like the parents above when missing)
  and every entry is extracted below it, in place.  Regular files,
  directories, symlinks and hard links are accepted; each file is written
  beside and renamed like a binary upload (one ``sync`` at the end instead of
  an fsync per file).  Modes and mtimes come from the archive; owners are
  ``uid``/``gid`` (default root), never the archive's.  ``permissions`` sets
  ``P``'s mode.  Entries that ``exclude`` names (:mod:`.excludes`) are
  skipped.  The upload stops with ``unsafe_entry`` at the first entry whose
  name is absolute or climbs out with ``..``, whose link target is absolute
  outside ``P`` or climbs out, that would be written through a symlink, or
  that is a device or FIFO (``unsupported_entry``).  Entries before it stay;
  nothing is ever written outside ``P``.

With ``"semantics": "cp-v1"`` the upload lands where ``cp`` would put a
source named ``source_name`` (:func:`file_target`, :func:`directory_target`),
and nothing is left behind by a failure: a file as above (and the parents made
for it are removed again); a directory is extracted into a hidden staging
directory and moved into place only once the whole archive is in (see
:func:`upload_tar_v1`).

**Download** (guest to host).  OPEN header ``{"op": "cp-download", "path": P,
"mode": "binary"|"tar"|"recursive"}``, optionally with ``"semantics"``,
``"exclude"`` and ``"uid"`` (for ``~``); the host half-closes at once.  The
agent sends a *head*, ``length u32 (big-endian) | JSON``, either ``{"ok":
true, "result": {"type": "file"|"directory", "name", "mode", "size"}}``
(``size`` is the byte count that follows for a non-empty binary file, else
``null``) or an error object as above, then the content, then HALF_CLOSE.  A
failure after the head resets the stream with ``INTERNAL_ERROR``.

- ``binary``: the bytes of the regular file ``P`` (symlinks followed).  A
  directory is ``is_a_directory`` with the words clients look for: *must
  specify a file not a directory*.
- ``tar``: a PAX tar of a file (one entry, its base name) or of a directory's
  contents (entries relative to it, no top-level entry, sorted, symlinks kept
  as links, sockets and excluded entries left out).  With cp-v1 semantics a
  file is ``not_a_directory``.
- ``recursive``: ``binary`` for a file, ``tar`` for a directory.

The file work runs on a thread per stream (disk I/O and ``fsync`` would stall
every stream under TCG) joined to the agent's loop by a :class:`_Bridge`:
credit is given back to the host only once the thread took the bytes, and the
thread blocks while its output waits for the host's credit, so both directions
keep the agent's memory flat and a slow host slows the guest's reads.

**Over the bulk port** (:mod:`.bulkport`): a ``cp-download`` header with
``"bulk": TOKEN`` has a non-empty regular file sent on the ``bulk`` port
(the head says ``"bulk": true``), and ``{"op": "cp-upload-bulk", ...,
"bulk": TOKEN}`` (:class:`BulkUploadHandler`) takes a binary upload's body
from it, its size from the stream; the port is one copy's at a time, and a
copy that cannot have it uses the stream (``docs/agent-protocol.md``, "The
bulk port").

Standard library only; :mod:`tarfile` is imported on first use of a tar.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import posixpath
import stat
import threading
from typing import TYPE_CHECKING, Any, Callable, Deque, Iterable, Iterator, Mapping, Optional

from vmservice.guest.agent import GuestStream, StreamHandler
from vmservice.guest.bulkport import BulkClosed, BulkPort, PortReader, Stop
from vmservice.wire.excludes import Excludes
from vmservice.guest.filesystem import ERROR_KINDS as FS_ERROR_KINDS
from vmservice.guest.filesystem import FsError, error_from_os, missing_directories, resolve_path, root_home
from vmservice.wire.errors import ResetCode
from vmservice.wire.bulk import MAX_END, decode_upload_end, parse_token
from vmservice.wire.payloads import encode_head

if TYPE_CHECKING:
    import tarfile

#: Copy modes of an upload.
MODES = ("binary", "tar")
#: Copy modes of a download: ``recursive`` is ``binary`` for a file, ``tar`` for a directory.
DOWNLOAD_MODES = ("binary", "tar", "recursive")
#: Where a copy lands: ``legacy`` (``path`` is the file or the directory
#: itself) or ``cp-v1`` (the placement rules of ``cp``).
SEMANTICS = ("legacy", "cp-v1")

#: Every ``error`` kind a reply may carry: the fs kinds and the copy's own.
ERROR_KINDS = FS_ERROR_KINDS + (
    "is_a_directory",
    "unsafe_entry",
    "unsupported_entry",
    "bad_archive",
    "missing_destination",
    "no_space",
)

#: Free space kept beyond an upload's announced unpacked size, for the file
#: system's own blocks and metadata: this much, plus :data:`SPACE_SHARE`.
SPACE_MARGIN = 256 * 1024
#: ... and one ``SPACE_SHARE``-th of the announced size.
SPACE_SHARE = 32

#: Mode of the directories a copy makes (parents, a tar's missing directories).
DIRECTORY_MODE = 0o755
#: Mode of a new file of a binary upload without ``permissions``.
FILE_MODE = 0o644
#: Bytes read from a file (or handed to tarfile) at a time.
CHUNK = 256 * 1024
#: The worker stops producing while this much output waits in the bridge ...
BRIDGE_HIGH_WATER = 512 * 1024
#: ... and the loop stops moving output to the stream beyond this much pending.
PENDING_HIGH_WATER = 256 * 1024


class _Cancelled(Exception):
    """The stream was reset: the worker stops and cleans up."""


class CopyFailed(Exception):
    """A failure after a download's head: the stream is reset."""


def error_reply(error: FsError) -> dict[str, Any]:
    """The ``{"ok": false, ...}`` object for ``error``."""
    return {"ok": False, "error": error.kind, "message": error.message}


def os_error(error: OSError, path: str) -> FsError:
    """
    The :class:`FsError` of an ``OSError`` met by a copy: a full file system
    (``ENOSPC``, ``EDQUOT``) is ``no_space``, the rest as the fs operations say.
    """
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return FsError("no_space", f"{path}: {error.strerror or 'no space left on device'}")
    return error_from_os(error, path)


# -- the bridge between the loop and a worker thread ------------------------------------------


class _Bridge:
    """
    Moves bytes between the agent's loop (one thread) and a copy's worker thread.

    Loop side: :meth:`feed`, :meth:`feed_eof`, :meth:`cancel`,
    :meth:`take_consumed`, :meth:`take_output`.  Worker side: :meth:`read`,
    :meth:`write`, :meth:`finish`.  The worker wakes the loop through a pipe
    (:attr:`wake_r`), written while the lock is held so :meth:`close` can
    never race it.

    :ivar received: bytes fed so far.
    :ivar finished: the worker is done (read under the lock or from the loop).
    :ivar failure: why the worker failed after output began, if it did.
    """

    def __init__(self, high_water: int = BRIDGE_HIGH_WATER) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._high_water = high_water
        self._inbox: Deque[bytes] = collections.deque()
        self._in_eof = False
        self._taken = 0
        self._outbox: Deque[bytes] = collections.deque()
        self._out_size = 0
        self._cancelled = False
        self._wake_pending = False
        self._closed = False
        self.received = 0
        self.finished = False
        self.failure: Optional[str] = None
        self.code: int = ResetCode.INTERNAL_ERROR
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)

    def _wake(self) -> None:
        # Called with the lock held.
        if not self._wake_pending and not self._closed:
            self._wake_pending = True
            os.write(self.wake_w, b"x")

    # -- loop side ------------------------------------------------------------------

    def feed(self, data: bytes) -> bool:
        """
        Body bytes from the host.  ``False`` when the worker is done and the
        caller must acknowledge (drop) them itself.
        """
        with self._lock:
            if self.finished or self._cancelled:
                return False
            self._inbox.append(data)
            self.received += len(data)
            self._cond.notify_all()
            return True

    def feed_eof(self) -> None:
        """The body ended."""
        with self._lock:
            self._in_eof = True
            self._cond.notify_all()

    def cancel(self) -> None:
        """The stream is gone: the worker raises :class:`_Cancelled` at its next step."""
        with self._lock:
            self._cancelled = True
            self._inbox.clear()
            self._outbox.clear()
            self._out_size = 0
            self._cond.notify_all()

    def woken(self) -> None:
        """Empty the wake pipe (before looking at the state)."""
        with self._lock:
            self._wake_pending = False
            if self._closed:
                return
            while True:
                try:
                    if not os.read(self.wake_r, 4096):
                        break
                except (BlockingIOError, InterruptedError):
                    break

    def take_consumed(self) -> int:
        """
        Bytes the worker took since the last call (and, once it is done, the
        ones it will never take): the credit to give back.
        """
        with self._lock:
            count, self._taken = self._taken, 0
            if self.finished:
                count += sum(len(chunk) for chunk in self._inbox)
                self._inbox.clear()
            return count

    def take_output(self) -> Optional[bytes]:
        """The next chunk the worker wrote, or ``None``."""
        with self._lock:
            if not self._outbox:
                return None
            chunk = self._outbox.popleft()
            self._out_size -= len(chunk)
            self._cond.notify_all()
            return chunk

    @property
    def drained(self) -> bool:
        """The worker is done and all it wrote was taken."""
        with self._lock:
            return self.finished and not self._outbox

    def close(self) -> None:
        """Close the wake pipe (only once the worker is done)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self.wake_r, self.wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass

    # -- worker side --------------------------------------------------------------

    def read(self, size: int = -1) -> bytes:
        """
        Up to ``size`` body bytes (any amount when negative), blocking until
        some arrive; ``b""`` at the end of the body.

        :raises _Cancelled: the stream was reset.
        """
        with self._lock:
            while not self._inbox and not self._in_eof and not self._cancelled:
                self._cond.wait()
            if self._cancelled:
                raise _Cancelled()
            if not self._inbox:
                return b""
            chunk = self._inbox.popleft()
            if 0 <= size < len(chunk):
                self._inbox.appendleft(chunk[size:])
                chunk = chunk[:size]
            self._taken += len(chunk)
            self._wake()
            return chunk

    def write(self, data: bytes) -> None:
        """
        Output for the host, blocking while :data:`BRIDGE_HIGH_WATER` bytes wait.

        :raises _Cancelled: the stream was reset.
        """
        if not data:
            return
        with self._lock:
            while self._out_size >= self._high_water and not self._cancelled:
                self._cond.wait()
            if self._cancelled:
                raise _Cancelled()
            self._outbox.append(bytes(data))
            self._out_size += len(data)
            self._wake()

    def finish(self, failure: Optional[str] = None, code: int = ResetCode.INTERNAL_ERROR) -> None:
        """
        The worker is done (``failure`` says why it failed after output
        began: the stream is reset with ``code``).
        """
        with self._lock:
            self.finished = True
            self.failure = failure
            self.code = code
            self._wake()


class _Reader:
    """A ``read`` function as a file object, for :mod:`tarfile`."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self.read = read


class _Writer:
    """A ``write`` function as a file object, for :mod:`tarfile`."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write

    def write(self, data: bytes) -> int:
        self._write(bytes(data))
        return len(data)


# -- writing files -------------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    with memoryview(data) as view:
        while view:
            written = os.write(fd, view)
            view = view[written:]


def _chown(path: str, uid: Optional[int], gid: Optional[int]) -> None:
    if uid is not None or gid is not None:
        os.lchown(path, -1 if uid is None else uid, -1 if gid is None else gid)


def make_directories(path: str, uid: Optional[int] = None, gid: Optional[int] = None) -> list[str]:
    """
    Make directory ``path`` and its missing parents with mode
    :data:`DIRECTORY_MODE` (exactly: the umask does not apply), owned by
    ``uid``/``gid`` when given.  Existing directories are left alone.

    :return: the directories made, outermost first.
    :raises FsError: ``not_a_directory`` when something on the way is not one.
    """
    made = []
    for directory in missing_directories(path):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise FsError("not_a_directory", f"{directory}: exists and is not a directory") from None
            continue
        except OSError as e:
            raise os_error(e, directory) from None
        made.append(directory)
        _chown(directory, uid, gid)
        os.chmod(directory, DIRECTORY_MODE)
    return made


def remove_made(directories: list[str]) -> None:
    """Remove ``directories`` (as :func:`make_directories` returned them) while they are empty, innermost first."""
    for directory in reversed(directories):
        try:
            os.rmdir(directory)
        except OSError:
            return


def remove_tree(path: str) -> None:
    """Remove ``path`` and everything below it, never following a symlink; what cannot be removed stays."""
    try:
        status = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(status.st_mode):
        try:
            names = os.listdir(path)
        except OSError:
            names = []
        for name in names:
            remove_tree(os.path.join(path, name))
        try:
            os.rmdir(path)
        except OSError:
            pass
        return
    try:
        os.unlink(path)
    except OSError:
        pass


def space_needed(size: int) -> int:
    """The free bytes an upload announcing ``size`` unpacked bytes needs (with the margin)."""
    return size + size // SPACE_SHARE + SPACE_MARGIN


def check_space(path: str, size: Optional[int]) -> None:
    """
    Refuse an upload of ``size`` unpacked bytes (``X-Slicer-Unpacked-Size``)
    into ``path`` when the file system that will hold it (that of ``path``,
    or of its nearest existing ancestor) has less than :func:`space_needed`
    free for an unprivileged user (``f_bavail``).  Nothing is written.

    :raises FsError: ``no_space``.
    """
    if size is None:
        return
    where = path
    while True:
        try:
            status = os.statvfs(where)
            break
        except (FileNotFoundError, NotADirectoryError):
            parent = os.path.dirname(where.rstrip("/")) or "/"
            if parent == where:
                return
            where = parent
        except OSError:
            return
    free = status.f_bavail * status.f_frsize
    needed = space_needed(size)
    if needed > free:
        raise FsError(
            "no_space",
            f"{where}: not enough free space: the upload unpacks to {size} bytes and needs {needed} "
            f"(with a margin of {SPACE_MARGIN} bytes and 1/{SPACE_SHARE}), but {free} are free; nothing was written",
        )


def home_of(uid: Optional[int]) -> str:
    """
    The home directory ``~`` names for ``uid``: the user's from
    ``/etc/passwd``; root's when ``uid`` is ``None`` or 0, or has no entry
    there (as ``~`` always was: clients send their own local uid, which the
    guest often does not know).
    """
    if not uid:
        return root_home()
    from vmservice.guest.execution import passwd_entry

    entry = passwd_entry(uid)
    if entry is None or not entry[1].startswith("/"):
        return root_home()
    return entry[1]


def _temp_name(target: str) -> str:
    directory, name = os.path.split(target)
    return os.path.join(directory, f".{name[:200]}.vmservice-{os.urandom(6).hex()}")


def write_atomically(
    target: str,
    chunks: Iterable[bytes],
    mode: int,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    fsync: bool = True,
    mtime: Optional[float] = None,
    fill: Optional[Callable[[int], int]] = None,
) -> int:
    """
    Write ``chunks`` to a new file beside ``target``, set its owner, mode (and
    mtime), fsync it, and rename it over ``target``; on any failure (or
    :class:`_Cancelled`) the new file is removed and ``target`` is untouched.

    :param fsync: fsync the file and then its directory (binary uploads); tar
        extraction syncs once at the end instead.
    :param fill: writes the content to the new file's descriptor and returns
        its size, in place of ``chunks`` (the bulk port's reader).
    :return: the bytes written.
    """
    temp = _temp_name(target)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    size = 0
    try:
        if fill is not None:
            size = fill(fd)
        for chunk in chunks if fill is None else ():
            _write_all(fd, chunk)
            size += len(chunk)
        if uid is not None or gid is not None:
            os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
        os.fchmod(fd, mode)
        if fsync:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        if mtime is not None:
            os.utime(temp, (mtime, mtime))
        os.rename(temp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    if fsync:
        _fsync_directory(os.path.dirname(target) or "/")
    return size


def _fsync_directory(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _body_chunks(read: Callable[[int], bytes]) -> Iterator[bytes]:
    while True:
        chunk = read(CHUNK)
        if not chunk:
            return
        yield chunk


def upload_file(
    path: str,
    read: Callable[[int], bytes],
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    permissions: Optional[int] = None,
    unpacked_size: Optional[int] = None,
    tidy: bool = False,
    fill: Optional[Callable[[int], int]] = None,
) -> dict[str, Any]:
    """
    A binary upload (see the module docstring): the body from ``read`` becomes
    file ``path``, replaced atomically.

    :param unpacked_size: the announced size, checked against the free space
        first (:func:`check_space`).
    :param tidy: on failure, also remove the parent directories made for the file.
    :param fill: writes the body to the new file instead of ``read`` (see
        :func:`write_atomically`).
    :return: the reply's ``result``.
    """
    try:
        existing: Optional[os.stat_result] = os.lstat(path)
    except FileNotFoundError:
        existing = None
    except OSError as e:
        raise error_from_os(e, path) from None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise FsError("is_a_directory", f"{path}: is a directory (give the path of the file to write)")
    check_space(path, unpacked_size)
    regular = existing if existing is not None and stat.S_ISREG(existing.st_mode) else None
    made = make_directories(os.path.dirname(path) or "/", uid, gid)
    mode = permissions if permissions is not None else (stat.S_IMODE(regular.st_mode) if regular else FILE_MODE)
    if regular is not None:
        uid = regular.st_uid if uid is None else uid
        gid = regular.st_gid if gid is None else gid
    try:
        size = write_atomically(path, _body_chunks(read), mode, uid, gid, fill=fill)
    except BaseException as e:
        if tidy:
            remove_made(made)
        if isinstance(e, OSError):
            raise os_error(e, path) from None
        raise
    return {"path": path, "size": size}


def source_name(value: object) -> Optional[str]:
    """
    A cp-v1 ``source_name``: ``None`` when absent or empty, else a base name.

    :raises FsError: ``invalid`` for a name with ``/`` or NUL, ``.`` or ``..``.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str) or "/" in value or "\x00" in value or value in (".", ".."):
        raise FsError("invalid", f"source_name must be a base name (no '/', not . or ..), not {value!r}")
    return value


def _named(path: str, name: Optional[str]) -> str:
    """``path/name``: where a source named ``name`` lands in the existing directory ``path``."""
    if name is None:
        raise FsError("invalid", f"{path} is a directory: source_name is needed to place the copy in it")
    return os.path.join(path, name)


def _strip_directory_suffix(path: str) -> str:
    """``path`` without trailing ``/`` and ``/.`` (``/`` stays ``/``)."""
    while len(path) > 1 and (path.endswith("/") or path.endswith("/.")):
        path = path[:-1] if path.endswith("/") else path[:-2]
    return path or "/"


def file_target(path: str, name: Optional[str]) -> str:
    """
    Where a cp-v1 upload of a file named ``name`` to ``path`` writes (the
    rules of ``cp``, symlinks at ``path`` followed):

    - ``path`` is an existing directory: ``path/name`` (which must not be a directory);
    - ``path`` is an existing file: ``path`` itself (replaced);
    - ``path`` does not exist and ends in ``/``: ``missing_destination``;
    - otherwise ``path`` (missing parents are made).

    :raises FsError: ``missing_destination``, ``is_a_directory``, ``invalid``
        (no ``name`` where one is needed), or what looking at ``path`` met.
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        if path.endswith("/"):
            raise FsError("missing_destination", f"{path}: no such directory (a path ending in / must exist)") from None
        return path
    except OSError as e:
        raise error_from_os(e, path) from None
    if not stat.S_ISDIR(status.st_mode):
        return path
    target = _named(_strip_directory_suffix(path), name)
    if os.path.isdir(target):
        raise FsError("is_a_directory", f"{target}: is a directory, which a file cannot replace")
    return target


def directory_target(path: str, name: Optional[str], copy_contents: bool) -> tuple[str, bool]:
    """
    Where a cp-v1 upload of a directory named ``name`` to ``path`` lands, and
    whether that directory exists already (the upload is then merged into it):

    - ``path`` exists and is not a directory: ``not_a_directory``;
    - ``path`` is a directory and ``copy_contents``: ``path`` (merged);
    - ``path`` is a directory: ``path/name`` (merged when it is a directory
      already, ``not_a_directory`` when it is something else);
    - ``path`` does not exist: ``path`` (created).

    :raises FsError: as above, ``invalid`` when ``name`` is needed and absent.
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return _strip_directory_suffix(path), False
    except OSError as e:
        raise error_from_os(e, path) from None
    if not stat.S_ISDIR(status.st_mode):
        raise FsError("not_a_directory", f"{path}: exists and is not a directory")
    path = _strip_directory_suffix(path)
    if copy_contents:
        return path, True
    target = _named(path, name)
    try:
        status = os.stat(target)
    except FileNotFoundError:
        return target, False
    except OSError as e:
        raise error_from_os(e, target) from None
    if not stat.S_ISDIR(status.st_mode):
        raise FsError("not_a_directory", f"{target}: exists and is not a directory")
    return target, True


def upload_file_v1(
    path: str,
    name: Optional[str],
    read: Callable[[int], bytes],
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    permissions: Optional[int] = None,
    unpacked_size: Optional[int] = None,
    fill: Optional[Callable[[int], int]] = None,
) -> dict[str, Any]:
    """
    A cp-v1 binary upload: the file goes where :func:`file_target` says,
    replaced atomically like a binary upload; on failure nothing is left
    (neither the file nor the parents made for it).

    :return: the reply's ``result``.
    """
    target = file_target(path, name)
    return upload_file(target, read, uid, gid, permissions, unpacked_size, tidy=True, fill=fill)


# -- tar extraction ------------------------------------------------------------------------------


def member_path(name: str) -> str:
    """
    The normalised relative path of a tar entry named ``name`` (``""`` for the
    archive's root, ``.``).

    :raises FsError: ``unsafe_entry`` for an absolute name or one that climbs
        out with ``..``.
    """
    if not name or "\x00" in name:
        raise FsError("unsafe_entry", f"tar entry {name!r}: empty or invalid name")
    if name.startswith("/"):
        raise FsError("unsafe_entry", f"tar entry {name!r}: absolute names are refused")
    normal = posixpath.normpath(name)
    if normal == ".." or normal.startswith("../"):
        raise FsError("unsafe_entry", f"tar entry {name!r}: climbs out of the destination with ..")
    return "" if normal == "." else normal


def _inside(path: str, base: str) -> bool:
    base = base.rstrip("/") or "/"
    return path == base or path.startswith(base if base == "/" else base + "/")


def link_target_inside(root: str, rel: str, target: str) -> bool:
    """
    Whether a symlink at ``rel`` (relative to ``root``) pointing at ``target``
    stays inside ``root``, lexically: an absolute target must lie under ``root``
    (as given or as resolved), a relative one must not climb above it.
    """
    if not target or "\x00" in target:
        return False
    if target.startswith("/"):
        normal = posixpath.normpath(target)
        return _inside(normal, posixpath.normpath(root)) or _inside(normal, os.path.realpath(root))
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return joined != ".." and not joined.startswith("../")


class _Extraction:
    """
    Extracts one tar stream below ``root``, refusing what is unsafe (see the
    module docstring).
    """

    def __init__(
        self,
        root: str,
        uid: Optional[int],
        gid: Optional[int],
        excludes: Optional[Excludes] = None,
        link_root: Optional[str] = None,
    ) -> None:
        """
        :param root: where entries are written.
        :param excludes: entries left out.
        :param link_root: where ``root`` ends up (a staging directory is
            renamed into place): absolute symlink targets must lie below it.
        """
        self.root = root
        self.uid = uid
        self.gid = gid
        self.excludes = excludes or Excludes()
        self.link_root = link_root or root
        self.entries = 0
        self._directories: set[str] = {""}
        self._modes: list[tuple[str, int, float]] = []

    def _path(self, rel: str) -> str:
        return os.path.join(self.root, rel) if rel else self.root

    def _ensure_directories(self, rel: str) -> None:
        """Make ``rel``'s directories below the root, refusing to go through a symlink."""
        if rel in self._directories:
            return
        prefix = ""
        for part in rel.split("/"):
            prefix = f"{prefix}/{part}" if prefix else part
            if prefix in self._directories:
                continue
            path = self._path(prefix)
            try:
                status = os.lstat(path)
            except FileNotFoundError:
                os.mkdir(path, 0o700)
                _chown(path, self.uid, self.gid)
                os.chmod(path, DIRECTORY_MODE)
            else:
                if stat.S_ISLNK(status.st_mode):
                    raise FsError("unsafe_entry", f"{prefix}: refusing to extract through a symlink")
                if not stat.S_ISDIR(status.st_mode):
                    raise FsError("not_a_directory", f"{prefix}: exists and is not a directory")
            self._directories.add(prefix)

    def _not_a_directory(self, rel: str) -> None:
        """Refuse to replace a directory by a file or link."""
        try:
            status = os.lstat(self._path(rel))
        except FileNotFoundError:
            return
        if stat.S_ISDIR(status.st_mode):
            raise FsError("exists", f"{rel}: is a directory in the destination")

    def _replace_with_link(self, target: str, make: Callable[[str], None]) -> None:
        temp = _temp_name(target)
        make(temp)
        try:
            _chown(temp, self.uid, self.gid)
            os.rename(temp, target)
        except BaseException:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        """Extract ``member`` of ``tar`` (a :class:`tarfile.TarFile` read as a stream)."""
        rel = member_path(member.name)
        if rel == "":
            if not member.isdir():
                raise FsError("unsafe_entry", f"tar entry {member.name!r}: names the destination itself")
            return
        if self.excludes.excludes(rel):
            return
        self._ensure_directories(posixpath.dirname(rel))
        path = self._path(rel)
        mode = member.mode & 0o7777
        if member.isdir():
            try:
                status: Optional[os.stat_result] = os.lstat(path)
            except FileNotFoundError:
                status = None
            if status is None:
                os.mkdir(path, 0o700)
                _chown(path, self.uid, self.gid)
            elif not stat.S_ISDIR(status.st_mode):
                raise FsError("exists", f"{rel}: exists and is not a directory")
            self._directories.add(rel)
            self._modes.append((rel, mode, float(member.mtime)))
        elif member.isreg():
            self._not_a_directory(rel)
            source = tar.extractfile(member)
            assert source is not None  # always a file object for a regular member
            write_atomically(path, _body_chunks(source.read), mode, self.uid, self.gid, fsync=False,
                             mtime=float(member.mtime))
        elif member.issym():
            if not link_target_inside(self.link_root, rel, member.linkname):
                raise FsError("unsafe_entry", f"tar entry {rel!r}: symlink to {member.linkname!r} points outside")
            self._not_a_directory(rel)
            self._replace_with_link(path, lambda temp: os.symlink(member.linkname, temp))
        elif member.islnk():
            try:
                source_rel = member_path(member.linkname)
            except FsError:
                raise FsError("unsafe_entry", f"tar entry {rel!r}: hard link to {member.linkname!r} points outside")
            if source_rel == "":
                raise FsError("unsafe_entry", f"tar entry {rel!r}: hard link to the destination itself")
            if self.excludes.excludes(source_rel):
                return
            self._ensure_directories(posixpath.dirname(source_rel))
            source_path = self._path(source_rel)
            try:
                source_status = os.lstat(source_path)
            except FileNotFoundError:
                raise FsError("bad_archive", f"tar entry {rel!r}: hard link to {source_rel!r}, not extracted") from None
            if not stat.S_ISREG(source_status.st_mode):
                raise FsError("unsafe_entry", f"tar entry {rel!r}: hard link to a non-file {source_rel!r}")
            self._not_a_directory(rel)
            self._replace_with_link(path, lambda temp: os.link(source_path, temp, follow_symlinks=False))
        else:
            raise FsError("unsupported_entry", f"tar entry {rel!r}: devices and FIFOs are not extracted")
        self.entries += 1

    def apply_modes(self, root: str) -> None:
        """Set the archive's directory modes and mtimes below ``root`` (deepest first, after their contents)."""
        for rel, mode, mtime in reversed(self._modes):
            path = os.path.join(root, rel)
            os.chmod(path, mode)
            os.utime(path, (mtime, mtime))

    def finish(self, permissions: Optional[int]) -> None:
        """Set directory modes and mtimes, ``permissions`` on the root, then sync."""
        self.apply_modes(self.root)
        if permissions is not None:
            os.chmod(self.root, permissions)
        os.sync()


def _extract(extraction: _Extraction, read: Callable[[int], bytes]) -> None:
    """Extract the tar stream from ``read`` with ``extraction``, then take the rest of the body."""
    import tarfile

    # typeshed asks any file object for read, write, seek, tell and close;
    # tarfile's stream modes only read ("r|") or only write ("w|").
    with tarfile.open(fileobj=_Reader(read), mode="r|", bufsize=CHUNK) as tar:  # type: ignore[call-overload]
        for member in tar:
            extraction.add(tar, member)
    # The archive's end may be followed by padding: take all of the body.
    while read(CHUNK):
        pass


def upload_tar(
    path: str,
    read: Callable[[int], bytes],
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    permissions: Optional[int] = None,
    excludes: Optional[Excludes] = None,
    unpacked_size: Optional[int] = None,
) -> dict[str, Any]:
    """
    A tar upload (see the module docstring): the tar stream from ``read`` is
    extracted below directory ``path``, in place.

    :param excludes: entries left out.
    :param unpacked_size: the announced size, checked against the free space
        first (:func:`check_space`).
    :return: the reply's ``result``.
    """
    import tarfile

    check_space(path, unpacked_size)
    make_directories(path, uid, gid)
    extraction = _Extraction(path, uid, gid, excludes)
    try:
        _extract(extraction, read)
        extraction.finish(permissions)
    except tarfile.TarError as e:
        raise FsError("bad_archive", f"not an uncompressed tar stream: {e}") from None
    except OSError as e:
        raise os_error(e, getattr(e, "filename", None) or path) from None
    return {"path": path, "entries": extraction.entries}


def merge_moves(staging: str, target: str) -> list[tuple[str, str]]:
    """
    The renames that merge the tree ``staging`` into the directory
    ``target``: a directory missing in ``target`` moves whole, one present
    is merged into, and every other entry replaces its namesake.  Every
    conflict is found before anything moves.

    :raises FsError: ``exists`` for a directory against a non-directory
        (either way round), ``unsafe_entry`` for a directory that would be
        merged through a symlink.
    """
    moves: list[tuple[str, str]] = []

    def visit(source: str, destination: str, prefix: str) -> None:
        for name in sorted(os.listdir(source)):
            inner, outer, rel = os.path.join(source, name), os.path.join(destination, name), prefix + name
            is_directory = stat.S_ISDIR(os.lstat(inner).st_mode)
            try:
                existing = os.lstat(outer)
            except FileNotFoundError:
                moves.append((inner, outer))
                continue
            if is_directory and stat.S_ISLNK(existing.st_mode):
                raise FsError("unsafe_entry", f"{rel}: a symlink in the destination: refusing to merge through it")
            if stat.S_ISDIR(existing.st_mode):
                if not is_directory:
                    raise FsError("exists", f"{rel}: is a directory in the destination")
                visit(inner, outer, rel + "/")
            elif is_directory:
                raise FsError("exists", f"{rel}: exists in the destination and is not a directory")
            else:
                moves.append((inner, outer))

    visit(staging, target, "")
    return moves


def move_across(source: str, destination: str) -> None:
    """
    Move ``source`` over ``destination`` on another file system (where
    ``rename`` fails with ``EXDEV``, such as a mount point inside a merged
    directory): copied beside ``destination`` with modes, times, owners and
    symlinks kept, then renamed over it, so it still appears at once; the
    copy is removed if anything fails.
    """
    import shutil

    temp = _temp_name(destination)
    try:
        if stat.S_ISDIR(os.lstat(source).st_mode):
            shutil.copytree(source, temp, symlinks=True)
            pairs = [("", source)]
            for directory, subdirectories, files in os.walk(source):
                rel = os.path.relpath(directory, source)
                for name in subdirectories + files:
                    pairs.append((os.path.normpath(os.path.join(rel, name)), os.path.join(directory, name)))
        else:
            shutil.copy2(source, temp, follow_symlinks=False)
            pairs = [("", source)]
        for rel, original in pairs:
            status = os.lstat(original)
            os.lchown(os.path.join(temp, rel) if rel else temp, status.st_uid, status.st_gid)
        os.rename(temp, destination)
    except BaseException:
        remove_tree(temp)
        raise


def move(source: str, destination: str) -> None:
    """``rename(source, destination)``, or :func:`move_across` file systems."""
    try:
        os.rename(source, destination)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        move_across(source, destination)


def upload_tar_v1(
    path: str,
    name: Optional[str],
    copy_contents: bool,
    read: Callable[[int], bytes],
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    permissions: Optional[int] = None,
    excludes: Optional[Excludes] = None,
    unpacked_size: Optional[int] = None,
) -> dict[str, Any]:
    """
    A cp-v1 tar upload: the directory lands where :func:`directory_target`
    says.  The archive is extracted into a hidden staging directory first
    (``.NAME.vmservice-XXXX`` beside a new directory, ``.vmservice-XXXX``
    inside one merged into), synced, and only then moved into place: a new
    directory with one rename, a merge with one :func:`move` per entry (all
    conflicts checked before the first).  Any failure before that removes the
    staging directory and the parents made, so the destination is as it was.

    :return: the reply's ``result``.
    """
    import tarfile

    target, exists = directory_target(path, name, copy_contents)
    check_space(target, unpacked_size)
    made: list[str] = []
    if exists:
        staging = os.path.join(target, f".vmservice-{os.urandom(6).hex()}")
    else:
        made = make_directories(os.path.dirname(target) or "/", uid, gid)
        staging = _temp_name(target)
    try:
        try:
            os.mkdir(staging, 0o700)
        except OSError as e:
            raise os_error(e, staging) from None
        try:
            extraction = _Extraction(staging, uid, gid, excludes, link_root=target)
            _extract(extraction, read)
            if exists:
                moves = merge_moves(staging, target)
                os.sync()
                for source, destination in moves:
                    move(source, destination)
                extraction.apply_modes(target)
                if permissions is not None:
                    os.chmod(target, permissions)
            else:
                _chown(staging, uid, gid)
                os.chmod(staging, DIRECTORY_MODE if permissions is None else permissions)
                extraction.apply_modes(staging)
                os.sync()
                os.rename(staging, target)
            os.sync()
        except tarfile.TarError as e:
            raise FsError("bad_archive", f"not an uncompressed tar stream: {e}") from None
        except OSError as e:
            raise os_error(e, getattr(e, "filename", None) or target) from None
    except BaseException:
        remove_tree(staging)
        remove_made(made)
        raise
    remove_tree(staging)
    return {"path": target, "entries": extraction.entries}


# -- downloads -----------------------------------------------------------------------------------


def _name_of(path: str) -> str:
    return os.path.basename(os.path.normpath(path)) or "/"


def walk(top: str, excludes: Optional[Excludes] = None) -> Iterator[str]:
    """
    The paths below directory ``top``, relative to it: sorted, each directory
    before its contents, symlinks not followed; unreadable directories are
    left out, and so are the entries ``excludes`` names (with their contents).
    """
    excludes = excludes or Excludes()
    try:
        first = sorted(os.listdir(top))
    except OSError as e:
        raise error_from_os(e, top) from None
    stack = [iter(first)]
    prefixes = [""]
    while stack:
        name = next(stack[-1], None)
        if name is None:
            stack.pop()
            prefixes.pop()
            continue
        rel = prefixes[-1] + name
        if excludes.excludes(rel):
            continue
        yield rel
        full = os.path.join(top, rel)
        if os.path.isdir(full) and not os.path.islink(full):
            try:
                children = sorted(os.listdir(full))
            except OSError:
                continue
            stack.append(iter(children))
            prefixes.append(rel + "/")


def download(
    path: str,
    mode: str,
    write: Callable[[bytes], None],
    semantics: str = "legacy",
    excludes: Optional[Excludes] = None,
    bulk: Optional[Callable[[dict[str, Any], str, int, int], bool]] = None,
) -> None:
    """
    A download (see the module docstring): the head, then the content, to
    ``write``.  Failures before the head become an error head; later ones raise.

    :param mode: ``binary``, ``tar`` or ``recursive`` (``binary`` for a file,
        ``tar`` for a directory).
    :param semantics: with ``cp-v1``, ``tar`` is for directories only.
    :param excludes: entries left out of a tar.
    :param bulk: sends a non-empty binary file another way, given the head's
        ``result``, the file's path, the open file and its size (``False``: it could not, and
        the file goes to ``write`` after all).
    """
    excludes = excludes or Excludes()
    try:
        status = os.stat(path)
    except OSError as e:
        write(encode_head(error_reply(error_from_os(e, path))))
        return
    is_dir = stat.S_ISDIR(status.st_mode)
    if mode == "recursive":
        mode = "tar" if is_dir else "binary"
    if mode == "binary" and is_dir:
        error = FsError("is_a_directory", f"{path}: is a directory: must specify a file not a directory (use tar)")
        write(encode_head(error_reply(error)))
        return
    if not is_dir and not stat.S_ISREG(status.st_mode):
        write(encode_head(error_reply(FsError("invalid", f"{path}: not a regular file or directory"))))
        return
    if mode == "tar" and not is_dir and semantics == "cp-v1":
        error = FsError("not_a_directory", f"{path}: is a file, and cp-v1-tar copies a directory "
                                           "(use cp-v1-binary or cp-v1-recursive for a file)")
        write(encode_head(error_reply(error)))
        return
    head = {"type": "directory" if is_dir else "file", "name": _name_of(path), "mode": stat.S_IMODE(status.st_mode)}
    if mode == "binary":
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            write(encode_head(error_reply(error_from_os(e, path))))
            return
        try:
            size = status.st_size
            result = {**head, "size": size or None}
            if size and bulk is not None and bulk(result, path, fd, size):
                return
            write(encode_head({"ok": True, "result": result}))
            sent = 0
            while True:
                want = CHUNK if not size else min(CHUNK, size - sent)
                if size and want <= 0:
                    break
                chunk = os.read(fd, want)
                if not chunk:
                    break
                write(chunk)
                sent += len(chunk)
            if size and sent != size:
                raise CopyFailed(f"{path}: the file shrank from {size} to {sent} bytes while it was read")
        finally:
            os.close(fd)
        return
    import tarfile

    write(encode_head({"ok": True, "result": {**head, "size": None}}))
    # The stream mode only writes (typeshed asks for a whole file object, see upload_tar).
    with tarfile.open(fileobj=_Writer(write), mode="w|", bufsize=CHUNK, format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        names: Iterable[tuple[str, str]]
        if is_dir:
            names = ((os.path.join(path, rel), rel) for rel in walk(path, excludes))
        else:
            names = [(path, _name_of(path))] if not excludes.excludes(_name_of(path)) else []
        for full, arcname in names:
            try:
                info = tar.gettarinfo(full, arcname=arcname)
                if info is None:  # a socket
                    continue
                if info.isreg():
                    with open(full, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
            except FileNotFoundError:
                continue  # vanished while the archive was made


# -- the stream handlers -------------------------------------------------------------------------


def _optional_id(header: Mapping[str, Any], name: str) -> Optional[int]:
    value = header.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32 - 1:
        raise FsError("invalid", f"{name} must be null or 0 .. 4294967294")
    return value


def _mode(header: Mapping[str, Any], modes: tuple[str, ...] = MODES) -> str:
    mode = header.get("mode", "binary")
    if mode not in modes:
        raise FsError("invalid", f"invalid mode: {mode} ({', '.join(modes)})")
    return str(mode)


def _semantics(header: Mapping[str, Any]) -> str:
    semantics = header.get("semantics") or "legacy"
    if semantics not in SEMANTICS:
        raise FsError("invalid", f"invalid copy semantics: {semantics} ({', '.join(SEMANTICS)})")
    return str(semantics)


def _excludes(header: Mapping[str, Any]) -> Excludes:
    patterns = header.get("exclude") or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise FsError("invalid", "exclude must be a list of patterns")
    return Excludes(patterns)


def _unpacked_size(header: Mapping[str, Any]) -> Optional[int]:
    value = header.get("unpacked_size")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FsError("invalid", "unpacked_size must be null or a byte count")
    return value


def _path(header: Mapping[str, Any], uid: Optional[int]) -> str:
    """The header's ``path``, with ``~`` as ``uid``'s home directory."""
    return resolve_path(header.get("path"), home=lambda: home_of(uid))


class _Refused(Exception):
    """The copy cannot take the bulk port: the stream is reset with ``REFUSED`` (the host copies without it)."""


class _CopyHandler(StreamHandler):
    """
    Runs :meth:`work` on a thread behind a :class:`_Bridge` and moves its
    output to the stream within the host's credit; ends the stream when the
    work is done (RESET when it failed after output began).

    :ivar _stop: wakes or stops a worker blocked on the bulk port (copies
        that offer it only).
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._bridge = _Bridge()
        self._ended = False
        self._pumping = False
        self._token = parse_token(header.get("bulk"))
        self._stop: Optional[Stop] = Stop() if self._token is not None else None

    def work(self, bridge: _Bridge) -> None:
        """The copy itself, on the worker thread."""
        raise NotImplementedError

    def start(self) -> None:
        self.stream.loop.watch(self._bridge.wake_r, self._woken)
        worker = threading.Thread(target=self._run, name=f"cp-{self.stream.stream_id}", daemon=True)
        worker.start()

    def _run(self) -> None:
        failure: Optional[str] = None
        code: int = ResetCode.INTERNAL_ERROR
        try:
            self.work(self._bridge)
        except _Cancelled:
            pass
        except _Refused as e:
            failure, code = str(e), ResetCode.REFUSED
        except BulkClosed as e:
            stop = self._stop
            if stop is None or not stop.stopped:
                failure = str(e)[:500]
            elif stop.reason is not None:
                failure, code = stop.reason, ResetCode.PROTOCOL_ERROR
        except Exception as e:
            failure = str(e)[:500] or repr(e)[:500]
        self._bridge.finish(failure, code)

    def data_received(self, data: bytes) -> None:
        if not self._bridge.feed(data):
            self.stream.consumed(len(data))

    def half_closed(self) -> None:
        self._bridge.feed_eof()

    def flushed(self) -> None:
        self._pump()

    def reset(self, code: int, reason: str) -> None:
        self._ended = True
        self._bridge.cancel()
        if self._stop is not None:
            self._stop.stop()
        if self._bridge.finished:
            self._close()

    def _close(self) -> None:
        self.stream.loop.watch(self._bridge.wake_r)
        self._bridge.close()
        if self._stop is not None:
            self._stop.close()

    def _woken(self) -> None:
        bridge = self._bridge
        bridge.woken()
        consumed = bridge.take_consumed()
        if consumed:
            self.stream.consumed(consumed)
        if self._ended:
            if bridge.finished:
                self._close()
            return
        self._pump()

    def _pump(self) -> None:
        if self._pumping or self._ended:
            return
        self._pumping = True
        try:
            bridge = self._bridge
            while self.stream.pending < PENDING_HIGH_WATER:
                chunk = bridge.take_output()
                if chunk is None:
                    break
                self.stream.write(chunk)
            if bridge.drained:
                self._ended = True
                self._close()
                if bridge.failure is not None:
                    self.stream.reset(bridge.code, bridge.failure[:200])
                else:
                    self.stream.end()
        finally:
            self._pumping = False


class UploadHandler(_CopyHandler):
    """``{"op": "cp-upload", ...}``: see the module docstring."""

    def work(self, bridge: _Bridge) -> None:
        self.respond(bridge, bridge.read, lambda: bridge.received)

    def respond(self, bridge: _Bridge, read: Callable[[int], bytes], received: Callable[[], int],
                fill: Optional[Callable[[int], int]] = None) -> None:
        """
        Make the copy of the body that ``read`` gives (a binary one: that
        ``fill`` writes to the file, when given), and write the reply.
        """
        header = self.header
        try:
            mode = _mode(header)
            semantics = _semantics(header)
            uid, gid = _optional_id(header, "uid"), _optional_id(header, "gid")
            path = _path(header, uid)
            permissions = header.get("permissions")
            if permissions is not None and (
                isinstance(permissions, bool) or not isinstance(permissions, int) or not 0 <= permissions <= 0o7777
            ):
                raise FsError("invalid", "permissions must be null or 0 .. 0o7777")
            excludes, unpacked = _excludes(header), _unpacked_size(header)
            if semantics == "cp-v1":
                name = source_name(header.get("source_name"))
                if mode == "binary":
                    result = upload_file_v1(path, name, read, uid, gid, permissions, unpacked, fill)
                else:
                    result = upload_tar_v1(path, name, header.get("copy_contents") is True, read, uid, gid,
                                           permissions, excludes, unpacked)
            elif mode == "binary":
                result = upload_file(path, read, uid, gid, permissions, unpacked, fill=fill)
            else:
                result = upload_tar(path, read, uid, gid, permissions, excludes, unpacked)
            result["size"] = received()
            reply: dict[str, Any] = {"ok": True, "result": result}
        except FsError as e:
            reply = error_reply(e)
        except OSError as e:
            reply = error_reply(os_error(e, getattr(e, "filename", None) or str(header.get("path"))))
        bridge.write(json.dumps(reply, separators=(",", ":")).encode("utf-8"))


class BulkUploadHandler(UploadHandler):
    """
    ``{"op": "cp-upload-bulk", ..., "bulk": TOKEN}``: a binary upload whose
    body comes on the bulk port (``docs/agent-protocol.md``).  The agent
    answers a head ``{"ok": true, "bulk": true}`` once it holds the port (or
    resets the stream with ``REFUSED``: the host then sends a ``cp-upload``),
    reads the token and the body from the port, and learns the body's size
    from the stream (``{"size": N}`` and HALF_CLOSE); then the reply as for
    ``cp-upload``.
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._end = b""
        self._reader: Optional[PortReader] = None
        self._total: Optional[int] = None

    def work(self, bridge: _Bridge) -> None:
        token, stop = self._token, self._stop
        if token is None or stop is None:
            raise _Refused("a bulk upload needs a token")
        port = BulkPort.claim(stop)
        if port is None:
            raise _Refused("the bulk port is busy or missing")
        try:
            bridge.write(encode_head({"ok": True, "bulk": True}))
            reader = PortReader(port, port.expect(token))
            self._reader = reader
            reader.total = self._total
            self.respond(bridge, reader.read, lambda: reader.received, reader.fill)
        finally:
            port.release()

    def data_received(self, data: bytes) -> None:
        self.stream.consumed(len(data))
        self._end += data
        if len(self._end) > MAX_END and self._stop is not None:
            self._stop.stop("the end of a bulk upload is too long")

    def half_closed(self) -> None:
        if self._stop is None or self._stop.stopped:
            return
        try:
            total = decode_upload_end(self._end)
        except ValueError as e:
            self._stop.stop(f"bad end of a bulk upload: {e}")
            return
        self._total = total
        if self._reader is not None:
            self._reader.total = total
        self._stop.wake()


class DownloadHandler(_CopyHandler):
    """``{"op": "cp-download", ...}``: see the module docstring."""

    def work(self, bridge: _Bridge) -> None:
        header = self.header
        try:
            mode = _mode(header, DOWNLOAD_MODES)
            semantics = _semantics(header)
            path = _path(header, _optional_id(header, "uid"))
            excludes = _excludes(header)
        except FsError as e:
            bridge.write(encode_head(error_reply(e)))
            return
        bulk = self._send_bulk if self._token is not None else None
        download(path, mode, bridge.write, semantics, excludes, bulk)

    def _send_bulk(self, head: dict[str, Any], path: str, fd: int, size: int) -> bool:
        """
        Send file ``fd`` on the bulk port, with ``head`` first on the stream;
        ``False`` when the port is busy or missing (nothing was written).
        """
        token, stop = self._token, self._stop
        assert token is not None and stop is not None
        port = BulkPort.claim(stop)
        if port is None:
            return False
        try:
            self._bridge.write(encode_head({"ok": True, "result": {**head, "bulk": True}}))
            port.expect(token)
            port.write_all(token)
            sent = port.send_file(path, fd, size)
        finally:
            port.release()
        if sent != size:
            raise CopyFailed(f"the file shrank from {size} to {sent} bytes while it was read")
        return True


__all__ = [
    "CHUNK",
    "DOWNLOAD_MODES",
    "ERROR_KINDS",
    "MODES",
    "SEMANTICS",
    "SPACE_MARGIN",
    "SPACE_SHARE",
    "BulkUploadHandler",
    "CopyFailed",
    "DownloadHandler",
    "UploadHandler",
    "check_space",
    "directory_target",
    "download",
    "error_reply",
    "file_target",
    "home_of",
    "link_target_inside",
    "make_directories",
    "member_path",
    "merge_moves",
    "move",
    "move_across",
    "os_error",
    "remove_made",
    "remove_tree",
    "source_name",
    "space_needed",
    "upload_file",
    "upload_file_v1",
    "upload_tar",
    "upload_tar_v1",
    "walk",
    "write_atomically",
]
