# -*- test-case-name: tests.hypervisors.qemu.test_huge_pages -*-
"""
Transparent huge pages refused to the QEMUs of a TCG daemon.

QEMU asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``)
on TCG's translation buffer and on its small RAM blocks (firmware, option
ROMs).  An idle clone touches a few MiB of those here and there, and with
huge pages every touch makes a whole 2 MiB page resident: measured side by
side in ``bench/density_warm.py`` (``pss_side_by_side``).  Under KVM the
guest's RAM is what huge pages speed up, so only a daemon whose VMs run
under TCG refuses them.

``prctl(PR_SET_THP_DISABLE)`` on the daemon's own process is inherited by
every child it starts and kept across ``execve``: its QEMUs' requests for
huge pages are then ignored.  The daemon allocates little of its own memory
that huge pages would back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Callable

#: ``prctl`` options (``linux/prctl.h``).
PR_SET_THP_DISABLE = 41

#: ``prctl(option, arg2, arg3, arg4, arg5)``: 0, or -1 on failure.
Prctl = Callable[[int, int, int, int, int], int]


def _libc_prctl(option: int, arg2: int, arg3: int, arg4: int, arg5: int) -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return int(libc.prctl(option, arg2, arg3, arg4, arg5))


def refuse_transparent_huge_pages(prctl: Prctl = _libc_prctl) -> bool:
    """Refuse transparent huge pages to this process and every child it starts from now on; whether the kernel took it."""
    return prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0


__all__ = ["PR_SET_THP_DISABLE", "refuse_transparent_huge_pages"]
