# -*- test-case-name: tests.images.test_cpio,tests.integration.images.test_cpio -*-
"""
A writer for the ``newc`` cpio format, the only archive format the Linux kernel unpacks as an initramfs.

The image builder needs an initramfs that holds a device node (``/dev/console``) and files owned by root.
GNU ``cpio`` can only archive what exists on disk, which would need ``mknod`` and root at build time; this
writer builds the archive from records instead, so the content is exact, reproducible (every timestamp is
zero) and testable without touching the file system.

The format (see ``Documentation/driver-api/early-userspace/buffer-format.rst`` in Linux): each member is a
110-byte ASCII header of the magic ``070701`` and thirteen 8-digit hexadecimal fields, then the NUL
terminated name padded to a multiple of four bytes, then the data padded likewise. A member named
``TRAILER!!!`` ends the archive. The kernel requires a directory to appear before anything inside it.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO, Iterable, Iterator

from attrs import field, frozen

__all__ = [
    "CpioEntry",
    "CpioError",
    "NEWC_MAGIC",
    "TRAILER_NAME",
    "char_device",
    "directory",
    "encode_newc",
    "regular_file",
    "symlink",
    "tree_entries",
    "write_newc",
]

NEWC_MAGIC = b"070701"
TRAILER_NAME = "TRAILER!!!"
_MAX_FIELD = 0xFFFFFFFF


class CpioError(ValueError):
    """
    An entry cannot be represented in a ``newc`` archive (bad name, value out of range, unknown type).
    """


def _check_name(instance: object, attribute: object, value: str) -> None:
    if not value or value.startswith("/") or "\x00" in value:
        raise CpioError(f"bad cpio member name {value!r}: must be relative, non-empty and without NUL")
    if value == TRAILER_NAME:
        raise CpioError(f"{TRAILER_NAME!r} is reserved for the end of the archive")
    if any(part in ("", ".", "..") for part in value.split("/")):
        raise CpioError(f"bad cpio member name {value!r}: empty, '.' or '..' component")


def _check_mode(instance: object, attribute: object, value: int) -> None:
    kind = stat.S_IFMT(value)
    if kind not in (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO):
        raise CpioError(f"unsupported file type in mode {value:o}")


def _check_u32(instance: object, attribute: object, value: int) -> None:
    if not 0 <= value <= _MAX_FIELD:
        raise CpioError(f"{getattr(attribute, 'name', 'field')}={value} does not fit in 32 bits")


@frozen
class CpioEntry:
    """
    One member of a ``newc`` archive.

    :ivar name: the path inside the archive, relative (``dev/console``, not ``/dev/console``).
    :ivar mode: the full ``st_mode``: file type bits and permissions.
    :ivar data: the file content; for a symbolic link, the encoded link target; empty otherwise.
    :ivar uid: owner; 0 because everything in a guest's initramfs belongs to root.
    :ivar gid: group.
    :ivar mtime: modification time; 0 keeps archives byte-for-byte reproducible.
    :ivar rdev_major: device major number, for character and block devices.
    :ivar rdev_minor: device minor number.
    """

    name: str = field(validator=_check_name)
    mode: int = field(validator=_check_mode)
    data: bytes = b""
    uid: int = field(default=0, validator=_check_u32)
    gid: int = field(default=0, validator=_check_u32)
    mtime: int = field(default=0, validator=_check_u32)
    rdev_major: int = field(default=0, validator=_check_u32)
    rdev_minor: int = field(default=0, validator=_check_u32)

    def __attrs_post_init__(self) -> None:
        kind = stat.S_IFMT(self.mode)
        if self.data and kind not in (stat.S_IFREG, stat.S_IFLNK):
            raise CpioError(f"{self.name}: only regular files and symlinks carry data")
        if kind == stat.S_IFLNK and not self.data:
            raise CpioError(f"{self.name}: a symbolic link needs a target")
        if len(self.data) > _MAX_FIELD:
            raise CpioError(f"{self.name}: file larger than 4 GiB")


def directory(name: str, perm: int = 0o755) -> CpioEntry:
    """
    A directory member ``name`` with permissions ``perm``.
    """
    return CpioEntry(name=name, mode=stat.S_IFDIR | perm)


def regular_file(name: str, data: bytes, perm: int = 0o644) -> CpioEntry:
    """
    A regular file member ``name`` holding ``data``, with permissions ``perm``.
    """
    return CpioEntry(name=name, mode=stat.S_IFREG | perm, data=data)


def symlink(name: str, target: str) -> CpioEntry:
    """
    A symbolic link member ``name`` pointing at ``target`` (not checked: it may point outside the archive).
    """
    return CpioEntry(name=name, mode=stat.S_IFLNK | 0o777, data=os.fsencode(target))


def char_device(name: str, major: int, minor: int, perm: int = 0o600) -> CpioEntry:
    """
    A character device node ``name`` of device numbers ``major``, ``minor`` and permissions ``perm``, e.g.
    ``char_device("dev/console", 5, 1)``: the kernel opens it for ``/init``'s standard streams before any
    ``devtmpfs`` is mounted.
    """
    return CpioEntry(name=name, mode=stat.S_IFCHR | perm, rdev_major=major, rdev_minor=minor)


def _pad(length: int) -> bytes:
    return b"\x00" * (-length % 4)


def _member(entry_name: str, mode: int, data: bytes, ino: int, nlink: int, entry: CpioEntry | None) -> bytes:
    name = os.fsencode(entry_name) + b"\x00"
    fields = (
        ino,
        mode,
        entry.uid if entry else 0,
        entry.gid if entry else 0,
        nlink,
        entry.mtime if entry else 0,
        len(data),
        0,  # devmajor: the device holding the file; meaningless in an archive
        0,  # devminor
        entry.rdev_major if entry else 0,
        entry.rdev_minor if entry else 0,
        len(name),
        0,  # check: only used by the "070702" variant
    )
    header = NEWC_MAGIC + b"".join(b"%08X" % value for value in fields)
    return header + name + _pad(len(header) + len(name)) + data + _pad(len(data))


def _members(entries: Iterable[CpioEntry]) -> Iterator[bytes]:
    seen: set[str] = set()
    ino = 0
    for entry in entries:
        if entry.name in seen:
            raise CpioError(f"duplicate cpio member {entry.name!r}")
        seen.add(entry.name)
        ino += 1
        nlink = 2 if stat.S_ISDIR(entry.mode) else 1
        yield _member(entry.name, entry.mode, entry.data, ino, nlink, entry)
    yield _member(TRAILER_NAME, 0, b"", 0, 1, None)


def encode_newc(entries: Iterable[CpioEntry]) -> bytes:
    """
    Encode ``entries``, in the given order, as a complete ``newc`` archive ending with the trailer.

    Every member gets its own inode number, so no two members are taken for hard links of each other.

    :raises CpioError: if two entries have the same name.
    """
    return b"".join(_members(entries))


def write_newc(entries: Iterable[CpioEntry], stream: BinaryIO) -> int:
    """
    Write the archive of ``entries`` to ``stream`` member by member (see :func:`encode_newc`), so a large
    archive is never held in memory twice.

    :return: the number of bytes written.
    """
    total = 0
    for member in _members(entries):
        stream.write(member)
        total += len(member)
    return total


def tree_entries(root: str, prefix: str = "") -> Iterator[CpioEntry]:
    """
    The entries for everything below the directory ``root`` (not ``root`` itself), parents before children
    and in sorted order, so the archive of a tree is reproducible. Ownership becomes root's and times zero.

    :param prefix: a path prepended to every name, e.g. ``"lib/modules"``; its own directories are not
        emitted, the caller adds them.
    :raises CpioError: for sockets and other types an archive cannot hold.
    """
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        relative_dir = os.path.relpath(dirpath, root)
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            relative = name if relative_dir == "." else f"{relative_dir}/{name}"
            member = f"{prefix}/{relative}" if prefix else relative
            info = os.lstat(path)
            perm = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                yield symlink(member, os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                yield directory(member, perm)
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as stream:
                    yield regular_file(member, stream.read(), perm)
            elif stat.S_ISCHR(info.st_mode):
                yield char_device(member, os.major(info.st_rdev), os.minor(info.st_rdev), perm)
            else:
                raise CpioError(f"{path}: cannot archive this file type")
        # os.walk does not descend into symlinked directories, which is what we want: links stay links.
