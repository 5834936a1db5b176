# -*- test-case-name: tests.images.test_kernel,tests.integration.images.test_kernel -*-
"""
The guest kernel: the uncompressed ``vmlinux`` taken out of Debian's cloud kernel, and the order in which
its modules must be loaded.

Why ``vmlinux``: QEMU's ``-machine microvm`` boots an ELF kernel through its PVH entry point, which skips
both the real-mode setup code and the in-guest decompression (under TCG, decompressing is a measurable
part of boot). Debian ships only the ``bzImage``; its payload is an LZ4 "legacy" stream that starts with
the magic ``02 21 4c 18``. ``lz4 -dc`` decompresses it and then exits 1 because of the bytes that follow
the stream in the ``bzImage``, so success is judged by the result: a complete x86-64 ELF executable.

Why a computed module order: the cloud kernel has virtio, virtio-mmio, the console, block, network and
vsock drivers as modules, and the initramfs loads them with plain ``insmod`` (fast, no ``modules.dep``
needed in the initramfs). The order comes from ``depmod``'s ``modules.dep`` so that a kernel update that
moves a dependency does not break the boot.
"""

from __future__ import annotations

import subprocess
from typing import Callable, Iterable, Sequence

from vmservice.images.elf import EM_X86_64, ElfError, parse_elf

__all__ = [
    "KernelError",
    "LZ4_LEGACY_MAGIC",
    "extract_vmlinux",
    "lz4_decompress",
    "module_load_order",
    "module_name",
]

LZ4_LEGACY_MAGIC = b"\x02\x21\x4c\x18"
_ET_EXEC = 2


class KernelError(Exception):
    """
    The kernel package could not be turned into what the guest needs.
    """


def lz4_decompress(data: bytes) -> bytes:
    """
    Decompress an LZ4 stream with the ``lz4`` program (Debian package ``lz4``), ignoring its exit status:
    it fails on trailing garbage after a complete stream, which is the normal case inside a ``bzImage``.
    The caller checks the output.
    """
    result = subprocess.run(["lz4", "-dc"], input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            check=False)
    return result.stdout


def _candidates(bzimage: bytes) -> list[int]:
    offsets = []
    start = bzimage.find(LZ4_LEGACY_MAGIC)
    while start >= 0:
        offsets.append(start)
        start = bzimage.find(LZ4_LEGACY_MAGIC, start + 1)
    return offsets


def extract_vmlinux(bzimage: bytes, decompress: Callable[[bytes], bytes] = lz4_decompress) -> bytes:
    """
    Find the LZ4 payload in ``bzimage`` and return the uncompressed kernel ELF.

    Every occurrence of the magic is tried in order (the magic can also occur by chance inside the setup
    code) until one decompresses into a complete x86-64 ELF executable.

    :param decompress: turns the bytes from the magic to the end of the file into the decompressed
        stream; injectable so tests need not run ``lz4``.
    :raises KernelError: if no occurrence yields a valid kernel.
    """
    reasons = []
    for offset in _candidates(bzimage):
        output = decompress(bzimage[offset:])
        try:
            info = parse_elf(output)
        except ElfError as error:
            reasons.append(f"at {offset}: {error}")
            continue
        if info.machine != EM_X86_64 or info.type != _ET_EXEC:
            reasons.append(f"at {offset}: ELF type {info.type} machine {info.machine}, not an x86-64 kernel")
            continue
        return output
    if not reasons:
        raise KernelError("no LZ4 legacy stream (magic 02 21 4c 18) in the kernel image")
    raise KernelError("no LZ4 stream in the kernel image decompresses to an x86-64 ELF: " + "; ".join(reasons))


def module_name(path: str) -> str:
    """
    The name the kernel knows a module by, from its file path: ``kernel/net/vmw_vsock/vsock.ko`` is
    ``vsock``; dashes and underscores are the same thing to the kernel, so dashes become underscores.
    """
    base = path.rsplit("/", 1)[-1]
    for suffix in (".ko.xz", ".ko.zst", ".ko.gz", ".ko"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base.replace("-", "_")


def _parse_modules_dep(text: str) -> dict[str, tuple[str, list[str]]]:
    modules: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        if not line.strip() or ":" not in line:
            continue
        path, _, deps = line.partition(":")
        modules[module_name(path.strip())] = (path.strip(), deps.split())
    return modules


def module_load_order(modules_dep: str, wanted: Sequence[str], builtin: Iterable[str] = ()) -> list[str]:
    """
    The module files to ``insmod``, in a working order, to get every module in ``wanted``.

    :param modules_dep: the text of ``modules.dep`` as written by ``depmod``: ``path: dep dep ...`` where
        each line lists all (transitive) dependencies, the last one to be loaded first.
    :param wanted: module names; those in ``builtin`` are skipped, since they are part of the kernel.
    :param builtin: the contents of ``modules.builtin`` (paths) or plain names.
    :return: paths relative to ``/lib/modules/<release>``, dependencies before dependants, no repeats.
    :raises KernelError: if a wanted module is neither a module nor built in.
    """
    modules = _parse_modules_dep(modules_dep)
    builtin_names = {module_name(entry) for entry in builtin}
    order: list[str] = []
    done: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in done:
            return
        if name in chain:
            raise KernelError("module dependency cycle: " + " -> ".join(chain + (name,)))
        path, deps = modules[name]
        for dep in reversed(deps):
            dep_name = module_name(dep)
            if dep_name not in modules:
                raise KernelError(f"{name} depends on {dep}, which modules.dep does not list")
            visit(dep_name, chain + (name,))
        done.add(name)
        order.append(path)

    for wanted_name in wanted:
        name = wanted_name.replace("-", "_")
        if name in modules:
            visit(name, ())
        elif name not in builtin_names:
            raise KernelError(f"kernel module {wanted_name!r} is neither a module nor built into the kernel")
    return order
