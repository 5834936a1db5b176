"""
Pipes for a test (:class:`Pipes`, a mixin of test cases), each end closed exactly once.
"""

from __future__ import annotations

import os
from typing import Any


class Pipes:
    """Pipes for a test, each end closed exactly once, at the latest in cleanup."""

    addCleanup: Any

    def pipe(self) -> tuple[int, int]:
        """A pipe whose ends are closed at cleanup unless :meth:`close` closed them already."""
        read_end, write_end = os.pipe()
        self.open_fds = getattr(self, "open_fds", set()) | {read_end, write_end}
        self.addCleanup(lambda: [self.close(fd) for fd in list(self.open_fds)])
        return read_end, write_end

    def close(self, fd: int) -> None:
        """Close ``fd`` once (a second close could hit a descriptor reused meanwhile)."""
        if fd in self.open_fds:
            self.open_fds.discard(fd)
            os.close(fd)
