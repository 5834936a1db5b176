# -*- test-case-name: tests.integration.images.test_kernel -*-
"""
Tests for :mod:`vmservice.images.kernel` with the real ``lz4``: a kernel ELF found in legacy LZ4 streams
among other bytes, as in a ``bzImage``.  The rest is in :mod:`tests.images.test_kernel`.
"""

from __future__ import annotations

import shutil
import subprocess

from twisted.trial.unittest import SynchronousTestCase

from tests.images.elfs import make_elf
from vmservice.images.kernel import LZ4_LEGACY_MAGIC, KernelError, extract_vmlinux, lz4_decompress


def lz4_legacy(data: bytes) -> bytes:
    """Compress with ``lz4 -l`` (the legacy frame the kernel's LZ4 payload uses)."""
    return subprocess.run(["lz4", "-l", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


class ExtractTests(SynchronousTestCase):
    """
    :func:`extract_vmlinux` and :func:`lz4_decompress` on streams made by ``lz4 -l``.
    """

    def setUp(self) -> None:
        if shutil.which("lz4") is None:
            self.fail("lz4 is not installed (apt-get install lz4)")
        self.kernel = make_elf(payload=bytes(range(256)) * 400)

    def test_real_lz4_with_trailing_bytes(self) -> None:
        """
        A legacy LZ4 stream inside other bytes, followed by more bytes (as in a bzImage: lz4 exits 1 on
        those), decompresses to the exact ELF.
        """
        bzimage = b"\x00setup code" * 50 + lz4_legacy(self.kernel) + b"\xff\x00trailer" * 20
        self.assertEqual(extract_vmlinux(bzimage), self.kernel)

    def test_decoy_magic(self) -> None:
        """
        A chance occurrence of the magic before the real stream is skipped because it does not
        decompress to an ELF.
        """
        bzimage = b"head" + LZ4_LEGACY_MAGIC + b"not a stream" * 10 + lz4_legacy(self.kernel) + b"tail"
        self.assertEqual(extract_vmlinux(bzimage), self.kernel)

    def test_truncated_stream(self) -> None:
        """
        A stream cut short yields a truncated ELF, which is refused.
        """
        stream = lz4_legacy(self.kernel)
        self.assertRaises(KernelError, extract_vmlinux, b"x" + stream[: len(stream) // 2])

    def test_wrong_machine(self) -> None:
        """
        An ELF for another machine (here AArch64) is not taken for an x86-64 kernel.
        """
        self.assertRaises(KernelError, extract_vmlinux, lz4_legacy(make_elf(machine=183)))

    def test_lz4_decompress_ignores_exit_status(self) -> None:
        """
        lz4_decompress returns the output even though lz4 fails on the trailing bytes.
        """
        self.assertEqual(lz4_decompress(lz4_legacy(b"hello" * 1000) + b"garbage!" * 4), b"hello" * 1000)
