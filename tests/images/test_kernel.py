# -*- test-case-name: tests.images.test_kernel -*-
"""
Tests for :mod:`vmservice.images.kernel`: finding the kernel ELF in a compressed image, and module order.
"""

from __future__ import annotations

import shutil
import subprocess

from twisted.trial.unittest import SynchronousTestCase

from tests.images.elfs import make_elf
from vmservice.images.kernel import (LZ4_LEGACY_MAGIC, KernelError, extract_vmlinux, lz4_decompress,
                                     module_load_order, module_name)


def lz4_legacy(data: bytes) -> bytes:
    """Compress with ``lz4 -l`` (the legacy frame the kernel's LZ4 payload uses)."""
    return subprocess.run(["lz4", "-l", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


class ExtractTests(SynchronousTestCase):
    """
    :func:`extract_vmlinux`.
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

    def test_injected_decompressor(self) -> None:
        """
        The decompressor gets the bytes from each magic to the end, in order, until one gives a kernel.
        """
        seen = []

        def decompress(data: bytes) -> bytes:
            seen.append(data)
            return self.kernel if data.startswith(LZ4_LEGACY_MAGIC + b"2") else b"junk"

        bzimage = b"a" + LZ4_LEGACY_MAGIC + b"1" + LZ4_LEGACY_MAGIC + b"2"
        self.assertEqual(extract_vmlinux(bzimage, decompress), self.kernel)
        self.assertEqual(seen, [LZ4_LEGACY_MAGIC + b"1" + LZ4_LEGACY_MAGIC + b"2", LZ4_LEGACY_MAGIC + b"2"])

    def test_no_magic(self) -> None:
        """
        An image without the LZ4 magic (say an XZ kernel) is refused with a message saying so.
        """
        error = self.assertRaises(KernelError, extract_vmlinux, b"\xfd7zXZ" + b"\x00" * 100)
        self.assertIn("02 21 4c 18", str(error))

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


MODULES_DEP = """\
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko: kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko \
kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/drivers/input/evdev.ko:
kernel/fs/some-fs.ko:
"""


class ModuleOrderTests(SynchronousTestCase):
    """
    :func:`module_load_order` and :func:`module_name`.
    """

    def test_dependencies_first(self) -> None:
        """
        Each module comes after all it depends on, once, in the order of the wanted list otherwise.
        """
        order = module_load_order(MODULES_DEP, ["virtio_mmio", "virtio_net", "evdev"])
        self.assertEqual([module_name(path) for path in order],
                         ["virtio", "virtio_ring", "virtio_mmio", "failover", "net_failover", "virtio_net",
                          "evdev"])

    def test_builtin_skipped(self) -> None:
        """
        A wanted module built into the kernel is skipped; one that is neither is an error.
        """
        self.assertEqual(module_load_order(MODULES_DEP, ["ext4"], ["kernel/fs/ext4/ext4.ko"]), [])
        self.assertRaises(KernelError, module_load_order, MODULES_DEP, ["nosuch"], [])

    def test_dashes(self) -> None:
        """
        Dashes and underscores name the same module.
        """
        self.assertEqual(module_load_order(MODULES_DEP, ["some_fs"]), ["kernel/fs/some-fs.ko"])
        self.assertEqual(module_name("kernel/x/a-b.ko.xz"), "a_b")

    def test_missing_dependency(self) -> None:
        """
        A dependency absent from modules.dep is reported rather than skipped.
        """
        self.assertRaises(KernelError, module_load_order, "a.ko: b.ko\n", ["a"])
