"""
A console log in a test's own directory (:class:`LogTestCase`), written as the test says, with the
sizes of the console module's reads counted; and :data:`NO_LIMIT`, a window larger than any of those
logs.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

#: A window larger than any log of these tests.
NO_LIMIT = 1 << 40


class LogTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.path = os.path.join(self.directory, "console.log")

    def write(self, data: bytes, path: str | None = None) -> str:
        path = path or self.path
        with open(path, "wb") as f:
            f.write(data)
        return path

    def reads(self) -> list[int]:
        """The sizes of the reads of the console module from now on."""
        reads: list[int] = []
        real = os.pread

        def counting(fd: int, size: int, offset: int) -> bytes:
            data = real(fd, size, offset)
            reads.append(len(data))
            return data

        self.patch(os, "pread", counting)
        return reads
