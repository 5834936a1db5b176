# -*- test-case-name: tests.hypervisors.test_file_identity -*-
"""
What tells one build of a file from another without reading it: its real
path, size and modification time.  The QEMU driver's version and the KVM
probe's remembered outcome (:mod:`.probe_memory`) are keyed by it, so that a
package upgrade (a new binary, kernel or initramfs) changes the key.
"""

from __future__ import annotations

import os
import shutil


def file_identity(path: str) -> tuple[str, int, int] | None:
    """
    The real path, size and modification time (ns) of the file at ``path``
    (links followed), or ``None`` when there is none.

    :param path: the file.
    """
    try:
        info = os.stat(path)
    except OSError:
        return None
    return os.path.realpath(path), info.st_size, info.st_mtime_ns


def binary_identity(binary: str) -> str:
    """
    What identifies the build of the program ``binary`` (found on ``PATH``):
    its :func:`file_identity` as one line; only the name when it is not
    found.

    :param binary: the program's name or path.
    """
    found = shutil.which(binary)
    identity = None if found is None else file_identity(found)
    if identity is None:
        return binary
    return " ".join(str(part) for part in identity)


__all__ = ["binary_identity", "file_identity"]
