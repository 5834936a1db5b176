# -*- test-case-name: tests.guest.test_rootgrowth,tests.integration.guest.test_rootgrowth -*-
"""
Growth of the guest's root file system to its disk, done by the agent as it starts.

The host may give a node a bigger disk than the image's file system. Growing an ext4 file system that
is mounted is one ``EXT4_IOC_RESIZE_FS`` ioctl on any directory of it (what ``resize2fs`` does online);
the agent does it itself, before it serves its port, instead of the boot scripts running ``dumpe2fs``,
``awk`` and ``resize2fs`` (three programs, each costing a ``fork``, an ``exec`` and the dynamic linker
under TCG, on every boot). Whether there is anything to grow is read from the file system's superblock on
the device and the device's size in ``/sys``: a boot with nothing to grow costs two small reads.

Guest side: standard library only.
"""

from __future__ import annotations

import os
import struct

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Callable

__all__ = ["EXT4_IOC_RESIZE_FS", "grow_root", "parse_superblock"]

#: ``_IOW('f', 16, __u64)``: grow a mounted ext4 file system to the given number of blocks.
EXT4_IOC_RESIZE_FS = 0x40086610
#: Where the ext4 superblock starts on the device, and the part of it read here.
SUPERBLOCK_OFFSET = 1024
SUPERBLOCK_SIZE = 1024
_EXT4_MAGIC = 0xEF53
_INCOMPAT_64BIT = 0x80


def parse_superblock(data: bytes) -> tuple[int, int] | None:
    """
    The block count and block size in bytes of the ext2/3/4 superblock ``data`` (the 1 KiB at offset
    1024 of the device), or ``None`` when it is not one.
    """
    if len(data) < SUPERBLOCK_SIZE:
        return None
    (magic,) = struct.unpack_from("<H", data, 0x38)
    if magic != _EXT4_MAGIC:
        return None
    count_lo, log_block_size = struct.unpack_from("<I", data, 0x04)[0], struct.unpack_from("<I", data, 0x18)[0]
    (incompat,) = struct.unpack_from("<I", data, 0x60)
    count_hi = struct.unpack_from("<I", data, 0x150)[0] if incompat & _INCOMPAT_64BIT else 0
    return count_hi << 32 | count_lo, 1024 << log_block_size


def _root_device(mountpoint: str) -> tuple[str, int] | None:
    """The device node of the block device ``mountpoint`` lives on and its size in bytes, if it is one."""
    st_dev = os.stat(mountpoint).st_dev
    sysfs = f"/sys/dev/block/{os.major(st_dev)}:{os.minor(st_dev)}"
    try:
        with open(f"{sysfs}/size") as stream:
            sectors = int(stream.read())
        with open(f"{sysfs}/uevent") as stream:
            names = [line[8:].strip() for line in stream if line.startswith("DEVNAME=")]
    except (OSError, ValueError):
        return None
    if not names:
        return None
    return f"/dev/{names[0]}", sectors * 512


def grow_root(say: Callable[[str], None], mountpoint: str = "/") -> bool:
    """
    Grow the ext4 file system mounted at ``mountpoint`` to the size of its block device when the device
    is bigger; say what was done (or what failed) with ``say``, one line each, as the boot scripts would.
    Any error is said and swallowed: a node with a file system smaller than its disk still works.

    :return: whether the file system was grown.
    """
    try:
        if os.statvfs(mountpoint).f_flag & os.ST_RDONLY:
            return False
        found = _root_device(mountpoint)
        if found is None:
            return False
        device, disk_bytes = found
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
        try:
            superblock = parse_superblock(os.pread(fd, SUPERBLOCK_SIZE, SUPERBLOCK_OFFSET))
        finally:
            os.close(fd)
        if superblock is None:
            return False
        block_count, block_size = superblock
        blocks = disk_bytes // block_size
        if blocks <= block_count:
            return False
        say(f"vmservice-init: growing {device} from {block_count * block_size // 1048576} MiB "
            f"to {disk_bytes // 1048576} MiB")
        import fcntl  # only when there is something to grow

        fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, EXT4_IOC_RESIZE_FS, struct.pack("=Q", blocks))
        finally:
            os.close(fd)
        return True
    except OSError as error:
        say(f"vmservice-init: warning: growing the root file system failed: {error}")
        return False
