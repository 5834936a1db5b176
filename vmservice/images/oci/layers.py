# -*- test-case-name: tests.images.oci.test_layers -*-
"""
A layer applied to a root tree as a container runtime would (:func:`apply_layer`): entries replace what
the lower layers left at their path; ``.wh.NAME`` deletes ``NAME`` of the lower layers and
``.wh..wh..opq`` empties its directory of them.  A whiteout must name one entry of its own directory:
``.wh.``, ``.wh..`` and ``.wh...`` (nothing, the directory itself, its parent) are refused, as is a
separator in the name.  Layers may be uncompressed, gzip (also bzip2 and xz) or zstd (with the ``zstd``
program).  Paths are confined to the tree: a member whose name climbs out of it (``..``) is refused, and
symbolic links met on the way to a member, absolute ones included, are resolved inside the tree, never on
the host (:func:`.paths.resolve_inside`).  Absolute symbolic links are kept as they are: they are right
once the tree is the guest's root.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from contextlib import contextmanager
from typing import IO, Iterator

from .errors import OciError
from .paths import resolve_inside

_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _remove(path: str) -> None:
    """Remove whatever is at ``path`` (a directory with its content), if anything; never through a link."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _member_parts(name: str) -> list[str]:
    """The components of a layer member's ``name`` (``\\`` read as ``/``), refused when one is ``..``."""
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    if ".." in parts:
        raise OciError(f"layer member {name!r} points outside the root")
    return parts


def _whiteout_target(member: str, name: str) -> str:
    """
    The entry whiteout ``name`` (the last component of layer member ``member``) deletes: one name in its
    directory.

    :raises OciError: for ``.wh.`` (the directory itself, by ``os.path.join``), ``.wh..`` (the directory)
        and ``.wh...`` (its parent: the tree's parent for a whiteout at its top), or a separator.
    """
    target = name[len(_WHITEOUT):]
    if target in ("", ".", "..") or any(separator in target for separator in ("/", "\\", "\0")):
        raise OciError(f"layer member {member!r} is a whiteout of {target!r}, which is not one entry of its directory")
    return target


def _prune_opaque(directory: str, relative: str, created: set[str]) -> None:
    """Remove what lower layers left in ``directory``: whatever this layer did not create."""
    for name in os.listdir(directory):
        child_relative = f"{relative}/{name}" if relative else name
        child = os.path.join(directory, name)
        if child_relative not in created:
            _remove(child)
        elif os.path.isdir(child) and not os.path.islink(child):
            _prune_opaque(child, child_relative, created)


@contextmanager
def _layer_tar(stream: IO[bytes]) -> Iterator[tarfile.TarFile]:
    """The layer in ``stream`` as a tar file read in order (zstd through the ``zstd`` program, else by tarfile)."""
    magic = stream.read(4)
    stream.seek(0)
    if magic == _ZSTD_MAGIC:
        if shutil.which("zstd") is None:
            raise OciError("the layer is zstd-compressed and the zstd program is missing")
        with tempfile.TemporaryFile() as compressed:
            shutil.copyfileobj(stream, compressed)
            compressed.seek(0)
            process = subprocess.Popen(["zstd", "-d", "-c", "-q"], stdin=compressed, stdout=subprocess.PIPE)
            assert process.stdout is not None
            try:
                with tarfile.open(fileobj=process.stdout, mode="r|") as tar:
                    yield tar
                while process.stdout.read(1024 * 1024):
                    pass
            finally:
                process.stdout.close()
                code = process.wait()
            if code != 0:
                raise OciError(f"zstd failed ({code}) on the layer")
        return
    try:
        tar = tarfile.open(fileobj=stream, mode="r|*")
    except tarfile.TarError as error:
        raise OciError(f"the layer is not a tar file: {error}") from None
    with tar:
        yield tar


def apply_layer(stream: IO[bytes], root: str) -> int:
    """
    Apply one layer, read from the seekable ``stream``, to the tree ``root`` (which must exist).

    :return: how many members were applied (whiteouts included).
    :raises OciError: if a member's path climbs out of the tree, a whiteout names no single entry of its
        directory, a hard link's target is missing, or the layer is not a tar file.
    """
    created: set[str] = set()
    opaque: list[tuple[str, str]] = []
    count = 0
    try:
        with _layer_tar(stream) as tar:
            for member in tar:
                parts = _member_parts(member.name)
                count += 1
                if not parts:
                    continue
                relative = "/".join(parts)
                parent_relative = "/".join(parts[:-1])
                parent = resolve_inside(root, parent_relative)
                name = parts[-1]
                if name == _OPAQUE:
                    opaque.append((parent, parent_relative))
                    continue
                if name.startswith(_WHITEOUT):
                    _remove(os.path.join(parent, _whiteout_target(member.name, name)))
                    continue
                if not os.path.isdir(parent):
                    _remove(parent)
                    os.makedirs(parent, exist_ok=True)
                _extract(tar, member, root, os.path.join(parent, name))
                created.add(relative)
                for depth in range(1, len(parts)):
                    created.add("/".join(parts[:depth]))
    except tarfile.TarError as error:
        raise OciError(f"the layer is damaged: {error}") from None
    for directory, relative in opaque:
        if os.path.isdir(directory):
            _prune_opaque(directory, relative, created)
    return count


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, root: str, path: str) -> None:
    """Write ``member`` at ``path`` in the tree ``root`` (replacing what is there), with its owner, mode and time."""
    existing_dir = os.path.isdir(path) and not os.path.islink(path)
    if member.isdir():
        if not existing_dir:
            _remove(path)
            os.mkdir(path)
    else:
        _remove(path)
        if member.isfile():
            source = tar.extractfile(member)
            assert source is not None
            with source, open(path, "wb") as written:
                shutil.copyfileobj(source, written, 1024 * 1024)
        elif member.issym():
            os.symlink(member.linkname, path)
        elif member.islnk():
            target_parts = _member_parts(member.linkname)
            target = os.path.join(resolve_inside(root, "/".join(target_parts[:-1])), target_parts[-1]) \
                if target_parts else root
            if not os.path.lexists(target) or (os.path.isdir(target) and not os.path.islink(target)):
                raise OciError(f"hard link {member.name} -> {member.linkname}: no such file in the tree")
            os.link(target, path, follow_symlinks=False)
            return
        elif member.ischr() or member.isblk():
            kind = stat.S_IFCHR if member.ischr() else stat.S_IFBLK
            os.mknod(path, kind | (member.mode & 0o7777), os.makedev(member.devmajor, member.devminor))
        elif member.isfifo():
            os.mkfifo(path, member.mode & 0o7777)
        else:
            return
    os.lchown(path, member.uid, member.gid)
    if not member.issym():
        os.chmod(path, member.mode & 0o7777)
    os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)


__all__ = ["apply_layer"]
