# -*- test-case-name: tests.images.test_initramfs -*-
"""
The guest's initramfs: the smallest thing that can load the virtio modules and switch to the root disk.

It is kept small on purpose: the kernel unpacks it into RAM at every boot (a 36 MB initramfs does not even
unpack in 128 MiB), and it is left uncompressed because decompressing costs more under TCG than copying.
It holds busybox-static with a link per applet in ``/bin``, the modules in load order (listed in
``/etc/vmservice/modules`` for ``/init`` to ``insmod``), ``/dev/console`` (the kernel opens it for
``/init``'s standard streams before anything is mounted) and ``/init`` itself
(``vmservice/guest/files/init``).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from vmservice.images.cpio import CpioEntry, char_device, directory, regular_file, symlink

__all__ = ["initramfs_entries"]

_DIRECTORIES = ("bin", "dev", "etc", "etc/vmservice", "lib", "lib/modules", "newroot", "proc", "sys")


def initramfs_entries(init_script: bytes, busybox: bytes, applets: Iterable[str],
                      modules: Sequence[tuple[str, bytes]]) -> list[CpioEntry]:
    """
    The members of the initramfs, parents first.

    :param init_script: the content of ``/init``.
    :param busybox: the static busybox binary.
    :param applets: applet names (``busybox --list``); each becomes ``/bin/<name> -> busybox``.
    :param modules: ``(path, content)`` of each module in load order; ``path`` is relative to
        ``/lib/modules`` (``kernel/drivers/virtio/virtio.ko``).
    """
    entries = [directory(name) for name in _DIRECTORIES]
    entries.append(char_device("dev/console", 5, 1, 0o600))
    entries.append(regular_file("bin/busybox", busybox, 0o755))
    for name in sorted(set(applets)):
        if name and "/" not in name and name != "busybox":
            entries.append(symlink(f"bin/{name}", "busybox"))
    made = set(_DIRECTORIES)
    for path, content in modules:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "lib/modules/" + "/".join(parts[:depth])
            if parent not in made:
                made.add(parent)
                entries.append(directory(parent))
        entries.append(regular_file(f"lib/modules/{path}", content, 0o644))
    listing = "".join(f"{path}\n" for path, _content in modules).encode()
    entries.append(regular_file("etc/vmservice/modules", listing, 0o644))
    entries.append(regular_file("init", init_script, 0o755))
    return entries
