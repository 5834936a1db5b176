"""
Tar files of given entries (files, directories, links, a FIFO) for the copy tests of the guest agent
(:mod:`tests.guest.test_copying`, :mod:`tests.integration.guest.test_copying`).
"""

from __future__ import annotations

import io
import tarfile
from typing import Any


def make_tar(entries: list[tuple[str, Any]]) -> bytes:
    """
    A tar of ``entries``: ``(name, bytes)`` files, ``(name, None)`` directories,
    ``(name, ("sym"|"hard", target))`` links, ``(name, ("fifo",))``.
    """
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, value in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1_600_000_000
            if value is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o750
                tar.addfile(info)
            elif isinstance(value, bytes):
                info.size, info.mode = len(value), 0o640
                tar.addfile(info, io.BytesIO(value))
            elif value[0] == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
            else:
                info.type = tarfile.SYMTYPE if value[0] == "sym" else tarfile.LNKTYPE
                info.linkname = value[1]
                tar.addfile(info)
    return out.getvalue()
