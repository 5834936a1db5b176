# -*- test-case-name: tests.guest.test_filesystem_details -*-
"""
The guest's file-system operations beyond the basic four
(:mod:`vmservice.guest.filesystem`): an entry's details, renaming, making a
directory owned by a user, and setting an entry's metadata.

An entry with details (a header's ``details``) adds to the basic entry
``uid``, ``gid``, ``owner`` and ``group`` (the names in the password and group
databases, the numbers as text when they have none), ``symlink_target`` (for
a symlink: the path it resolves to, or its own path when it does not
resolve), ``target_type`` and ``target_mode`` (what a symlink resolves to,
``null`` when it does not) and ``metadata``: the entry's ``user.e2b.<key>``
extended attributes as ``{key: value}``, at most
:data:`~vmservice.wire.openheaders.fs.MAX_METADATA_BYTES` of them.

Standard library only: it runs inside the guest.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Callable, Optional

from vmservice.guest.filesystem import (FsError, describe, do_readdir, error_from_os, file_type,
                                        missing_directories)
from vmservice.wire.openheaders.fs import MAX_METADATA_BYTES, METADATA_PREFIX

#: Errors that mean a file system keeps no extended attributes.
_NO_XATTRS = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENODATA, errno.EPERM, errno.EACCES)


def _name_of(uid: int, lookup: Callable[[int], Any]) -> str:
    try:
        return str(lookup(uid)[0])
    except (KeyError, OverflowError):
        return str(uid)


def owner_name(uid: int) -> str:
    """The user name of ``uid``, or the number as text."""
    import pwd

    return _name_of(uid, pwd.getpwuid)


def group_name(gid: int) -> str:
    """The group name of ``gid``, or the number as text."""
    import grp

    return _name_of(gid, grp.getgrgid)


def read_metadata(path: str) -> dict[str, str]:
    """
    The ``user.e2b.*`` attributes of ``path`` (following a symlink) without
    their prefix, undecodable bytes replaced; those past
    :data:`MAX_METADATA_BYTES` in all are left out.
    """
    try:
        names = os.listxattr(path)
    except OSError:
        return {}
    metadata: dict[str, str] = {}
    total = 0
    for name in sorted(names):
        if not name.startswith(METADATA_PREFIX):
            continue
        try:
            value = os.getxattr(path, name)[:MAX_METADATA_BYTES]
        except OSError:
            continue
        total += len(name) + len(value)
        if total > MAX_METADATA_BYTES:
            break
        metadata[name[len(METADATA_PREFIX):]] = value.decode("ascii", "replace")
    return metadata


def detailed(path: str, name: str, status: os.stat_result) -> dict[str, Any]:
    """The entry of ``path`` (named ``name``, ``lstat`` status ``status``) with its details."""
    entry = describe(name, status)
    target: Optional[str] = None
    target_type: Optional[str] = None
    target_mode: Optional[int] = None
    if stat.S_ISLNK(status.st_mode):
        try:
            target = os.path.realpath(path, strict=True)
            resolved = os.stat(target)
            target_type, target_mode = file_type(resolved.st_mode), stat.S_IMODE(resolved.st_mode)
        except (OSError, RuntimeError):
            target = path
    entry.update(uid=status.st_uid, gid=status.st_gid, owner=owner_name(status.st_uid),
                 group=group_name(status.st_gid), symlink_target=target, target_type=target_type,
                 target_mode=target_mode, metadata=read_metadata(path))
    return entry


def _entry_name(path: str) -> str:
    return os.path.basename(os.path.normpath(path).rstrip("/")) or "/"


def detailed_stat(path: str) -> dict[str, Any]:
    """The entry of ``path`` itself with its details (a symlink is described, not followed)."""
    try:
        return detailed(path, _entry_name(path), os.lstat(path))
    except OSError as e:
        raise error_from_os(e, path) from None


def detailed_readdir(path: str, cancelled: Callable[[], bool] = lambda: False) -> list[dict[str, Any]]:
    """:func:`~vmservice.guest.filesystem.do_readdir` with each entry's details."""
    return do_readdir(path, cancelled, detailed)


def _chown(path: str, uid: Optional[int], gid: Optional[int]) -> None:
    if uid is not None or gid is not None:
        os.lchown(path, -1 if uid is None else uid, -1 if gid is None else gid)


def make_owned(path: str, mode: int, uid: Optional[int], gid: Optional[int]) -> list[str]:
    """
    Make the missing directories of ``path`` and ``path`` (``mode``; its
    parents 0755), each owned by ``uid``/``gid``; the directories made.

    :raises FsError: ``exists`` when ``path`` is a directory already,
        ``not_a_directory`` when it or an ancestor is something else.
    """
    missing = missing_directories(path, itself="not_a_directory")
    if not missing:
        raise FsError("exists", f"{path}: directory already exists")
    for directory in missing:
        try:
            os.mkdir(directory, 0o700)
            os.chmod(directory, mode if directory == missing[-1] else 0o755)
            _chown(directory, uid, gid)
        except FileExistsError:
            continue
        except OSError as e:
            raise error_from_os(e, directory) from None
    return missing


def do_mkdir_owned(path: str, mode: int, uid: Optional[int], gid: Optional[int]) -> dict[str, Any]:
    """:func:`make_owned`, then the new directory's detailed entry."""
    make_owned(path, mode, uid, gid)
    return detailed_stat(path)


def do_rename(source: str, destination: str, uid: Optional[int], gid: Optional[int]) -> dict[str, Any]:
    """
    Rename ``source`` to ``destination`` (replacing a file there, as
    ``rename(2)`` does), its missing parent directories made owned by
    ``uid``/``gid``; the detailed entry at ``destination``.
    """
    parent = os.path.dirname(os.path.normpath(destination))
    try:
        os.lstat(source)
    except OSError as e:
        raise error_from_os(e, source) from None
    try:
        make_owned(parent, 0o755, uid, gid)
    except FsError as e:
        if e.kind != "exists":
            raise
    try:
        os.rename(source, destination)
    except OSError as e:
        raise error_from_os(e, destination) from None
    return detailed_stat(destination)


def do_setmeta(path: str, metadata: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """
    Set ``user.e2b.<key>`` to each value on ``path`` (following a symlink);
    a file system without extended attributes keeps none, as envd allows.
    The detailed entry afterwards.
    """
    for key, value in metadata:
        try:
            os.setxattr(path, METADATA_PREFIX + key, value.encode("ascii"))
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise error_from_os(e, path) from None
            if e.errno not in _NO_XATTRS:
                raise error_from_os(e, path) from None
            break
    return detailed_stat(path)


__all__ = ["detailed", "detailed_readdir", "detailed_stat", "do_mkdir_owned", "do_rename", "do_setmeta",
           "group_name", "make_owned", "owner_name", "read_metadata"]
