# -*- test-case-name: tests.guest.test_identity -*-
"""
The system calls an adoption (:mod:`vmservice.guest.identity`) makes on its
way: the host's entropy into the kernel's pool and its random generator
reseeded, a file replaced in place, and ``/etc/hosts``' text.  Standard library
only.
"""

from __future__ import annotations

import fcntl
import os
import struct
from typing import Any, Callable

#: ``_IOW('R', 0x03, int[2])``: add bytes to the pool and credit their entropy.
RNDADDENTROPY = 0x40085203
#: ``_IO('R', 0x07)``: reseed the CRNG from the pool now.
RNDRESEEDCRNG = 0x5207
#: ``struct rand_pool_info``'s head: ``int entropy_count`` (bits), ``int buf_size`` (bytes).
_POOL_INFO = struct.Struct("=ii")


def add_entropy(fd: int, entropy: bytes, ioctl: Callable[..., Any] = fcntl.ioctl) -> None:
    """
    Mix ``entropy`` into the kernel's pool on ``fd`` (``/dev/urandom``), crediting
    all its bits, then reseed the CRNG from it.
    """
    ioctl(fd, RNDADDENTROPY, _POOL_INFO.pack(len(entropy) * 8, len(entropy)) + entropy)
    ioctl(fd, RNDRESEEDCRNG, 0)


def hosts_file(hostname: str) -> str:
    """``/etc/hosts`` for ``hostname``, exactly as the guest's ``rc`` writes it at boot."""
    return f"127.0.0.1\tlocalhost\n127.0.1.1\t{hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def replace_file(path: str, content: str, mode: int, durable: bool = False) -> None:
    """
    Write ``content`` beside ``path`` (beside the file it links to, when it
    is a link: ``/etc/hostname`` into ``/run``), then rename it over that.
    Plain system calls: the fewest paths for a clone to translate.  ``durable``:
    on the disk (the file and its directory synced) before this returns.
    """
    try:
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    except OSError:  # not a link (EINVAL), or missing
        pass
    temporary = f"{path}.adopt"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.write(fd, content.encode())
        os.fchmod(fd, mode)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temporary, path)
    if durable:
        directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


__all__ = ["RNDADDENTROPY", "RNDRESEEDCRNG", "add_entropy", "hosts_file", "replace_file"]
