"""
A ``StringTransport`` of a UNIX socket that records the file descriptors sent over it
(:class:`DescriptorTransport`), for the tests of QMP (:mod:`tests.hypervisors.test_qmp`) and of the
driver that hands QEMU its files that way (:mod:`tests.hypervisors.qemu.test_migration`).
"""

from __future__ import annotations

import os

from twisted.internet.interfaces import IUNIXTransport
from twisted.internet.testing import StringTransport
from zope.interface import implementer


@implementer(IUNIXTransport)
class DescriptorTransport(StringTransport):
    """
    A StringTransport of a UNIX socket: it records each file descriptor sent
    (as the file it names then, the caller closing it later) with how many
    bytes had been written before it, i.e. the message it went out with.
    """

    def __init__(self) -> None:
        super().__init__()
        self.descriptors: list[tuple[int, str]] = []

    def sendFileDescriptor(self, descriptor: int) -> None:
        self.descriptors.append((len(self.value()), os.readlink(f"/proc/self/fd/{descriptor}")))
