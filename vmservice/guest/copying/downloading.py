# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
Downloads: the head, then a file's bytes or a tar of a directory (or of a file).
"""

from __future__ import annotations

import os
import stat
from typing import Any, Callable, Iterable, Iterator, Optional

from vmservice.guest.copying.bridge import FileWriter
from vmservice.guest.copying.errors import CopyFailed, error_reply
from vmservice.guest.copying.writing import CHUNK
from vmservice.guest.filesystem import FsError, error_from_os
from vmservice.wire.excludes import Excludes
from vmservice.wire.payloads import encode_head


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
    A download (see :mod:`vmservice.guest.copying`): the head, then the content, to
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
    refusal = _refusal(path, mode, status, semantics)
    if refusal is not None:
        write(encode_head(error_reply(refusal)))
        return
    head = {"type": "directory" if is_dir else "file", "name": _name_of(path), "mode": stat.S_IMODE(status.st_mode)}
    if mode == "binary":
        _send_file(path, status.st_size, head, write, bulk)
    else:
        _send_tar(path, is_dir, head, write, excludes)


def _refusal(path: str, mode: str, status: os.stat_result, semantics: str) -> Optional[FsError]:
    """Why ``path`` (of ``status``) cannot be downloaded in ``mode`` (``binary`` or ``tar``), if it cannot."""
    is_dir = stat.S_ISDIR(status.st_mode)
    if mode == "binary" and is_dir:
        return FsError("is_a_directory", f"{path}: is a directory: must specify a file not a directory (use tar)")
    if not is_dir and not stat.S_ISREG(status.st_mode):
        return FsError("invalid", f"{path}: not a regular file or directory")
    if mode == "tar" and not is_dir and semantics == "cp-v1":
        return FsError("not_a_directory", f"{path}: is a file, and cp-v1-tar copies a directory "
                                          "(use cp-v1-binary or cp-v1-recursive for a file)")
    return None


def _send_file(
    path: str,
    size: int,
    head: dict[str, Any],
    write: Callable[[bytes], None],
    bulk: Optional[Callable[[dict[str, Any], str, int, int], bool]],
) -> None:
    """
    A binary download of the regular file ``path`` of ``size`` bytes (as
    :func:`download` saw it): the head, then the bytes, to ``write`` (or by
    ``bulk``); an error head when it cannot be opened.

    :raises CopyFailed: the file shrank while it was read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        write(encode_head(error_reply(error_from_os(e, path))))
        return
    try:
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


def _send_tar(path: str, is_dir: bool, head: dict[str, Any], write: Callable[[bytes], None],
              excludes: Excludes) -> None:
    """A tar download of ``path`` (a directory's contents, or one file): the head, then the archive, to ``write``."""
    import tarfile

    write(encode_head({"ok": True, "result": {**head, "size": None}}))
    # The stream mode only writes (typeshed asks for a whole file object, see upload_tar).
    with tarfile.open(fileobj=FileWriter(write), mode="w|", bufsize=CHUNK, format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
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


__all__ = ["download", "walk"]
