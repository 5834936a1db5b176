# -*- test-case-name: tests.images.test_kernel -*-
"""
Tests for :mod:`vmservice.images.kernel`: finding the kernel ELF in a compressed image, and module order.
Decompressing with the real ``lz4`` is tested in :mod:`tests.integration.images.test_kernel`.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.images.elfs import make_elf
from vmservice.images.kernel import LZ4_LEGACY_MAGIC, KernelError, extract_vmlinux, module_load_order, module_name


class ExtractTests(SynchronousTestCase):
    """
    :func:`extract_vmlinux` with a decompressor given, or without a stream to decompress.
    """

    def setUp(self) -> None:
        self.kernel = make_elf(payload=bytes(range(256)) * 400)

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

    def test_truncated_elf_refused(self) -> None:
        """
        A stream that decompresses to a truncated ELF gives no kernel.
        """
        truncated = self.kernel[: len(self.kernel) // 2]
        self.assertRaises(KernelError, extract_vmlinux, LZ4_LEGACY_MAGIC + b"x", lambda data: truncated)

    def test_other_machine_refused(self) -> None:
        """
        An ELF for another machine (here AArch64) is not taken for an x86-64 kernel.
        """
        arm = make_elf(machine=183)
        self.assertRaises(KernelError, extract_vmlinux, LZ4_LEGACY_MAGIC + b"x", lambda data: arm)


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
