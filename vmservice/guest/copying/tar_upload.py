# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
Tar uploads: extracted in place (legacy), or into a staging directory moved into
place once the whole archive is in (cp-v1).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Callable, Optional

from vmservice.guest.copying.errors import os_error
from vmservice.guest.copying.extraction import Extraction, extract
from vmservice.guest.copying.placement import directory_target
from vmservice.guest.copying.writing import (DIRECTORY_MODE, check_space, chown, make_directories, remove_made,
                                             remove_tree, temp_name)
from vmservice.guest.filesystem import FsError
from vmservice.wire.excludes import Excludes


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
    A tar upload (see :mod:`vmservice.guest.copying`): the tar stream from ``read`` is
    extracted below directory ``path``, in place.

    :param excludes: entries left out.
    :param unpacked_size: the announced size, checked against the free space
        first (:func:`check_space`).
    :return: the reply's ``result``.
    """
    import tarfile

    check_space(path, unpacked_size)
    make_directories(path, uid, gid)
    extraction = Extraction(path, uid, gid, excludes)
    try:
        extract(extraction, read)
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

    temp = temp_name(destination)
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


def _merge(extraction: Extraction, staging: str, target: str, permissions: Optional[int]) -> None:
    """
    Merge the extracted ``staging`` into the existing directory ``target``:
    every conflict checked, synced, then one :func:`move` per entry; the
    archive's directory modes, and ``permissions`` on ``target``.
    """
    moves = merge_moves(staging, target)
    os.sync()
    for source, destination in moves:
        move(source, destination)
    extraction.apply_modes(target)
    if permissions is not None:
        os.chmod(target, permissions)


def _rename_into_place(extraction: Extraction, staging: str, target: str, uid: Optional[int], gid: Optional[int],
                       permissions: Optional[int]) -> None:
    """Give the extracted ``staging`` its owner and modes, sync it, and rename it to the new directory ``target``."""
    chown(staging, uid, gid)
    os.chmod(staging, DIRECTORY_MODE if permissions is None else permissions)
    extraction.apply_modes(staging)
    os.sync()
    os.rename(staging, target)


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
        staging = temp_name(target)
    try:
        try:
            os.mkdir(staging, 0o700)
        except OSError as e:
            raise os_error(e, staging) from None
        try:
            extraction = Extraction(staging, uid, gid, excludes, link_root=target)
            extract(extraction, read)
            if exists:
                _merge(extraction, staging, target, permissions)
            else:
                _rename_into_place(extraction, staging, target, uid, gid, permissions)
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


__all__ = ["merge_moves", "move", "move_across", "upload_tar", "upload_tar_v1"]
