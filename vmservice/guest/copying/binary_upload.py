# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
Binary uploads: the body becomes one file, written beside it and renamed over it.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Callable, Optional

from vmservice.guest.copying.errors import os_error
from vmservice.guest.copying.placement import file_target
from vmservice.guest.copying.writing import (FILE_MODE, body_chunks, check_space, make_directories, remove_made,
                                             write_atomically)
from vmservice.guest.filesystem import FsError, error_from_os


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
    A binary upload (see :mod:`vmservice.guest.copying`): the body from ``read`` becomes
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
        size = write_atomically(path, body_chunks(read), mode, uid, gid, fill=fill)
    except BaseException as e:
        if tidy:
            remove_made(made)
        if isinstance(e, OSError):
            raise os_error(e, path) from None
        raise
    return {"path": path, "size": size}


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


__all__ = ["upload_file", "upload_file_v1"]
