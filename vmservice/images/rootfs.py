# -*- test-case-name: tests.images.test_rootfs,tests.integration.images.test_rootfs -*-
"""
Assembling the guest's root file system from unpacked Debian packages, and checking it before it ships.

The packages are unpacked with ``dpkg-deb -x``, which writes ``/bin``, ``/lib`` and ``/usr/bin`` as they are
in the archives; Debian 12 systems merge them (``/bin -> usr/bin``), and so does :func:`merge_usr`, so that
``/bin/bash``, ``/usr/bin/bash``, ``/lib64/ld-linux-x86-64.so.2`` and friends all resolve, as programs
expect. Then come busybox's applet links, the guest's own files (init scripts, agent, power-button
watcher, the ``vmservice.wire`` codec), precompiled Python bytecode (the guest would otherwise compile the
standard library on every node's first boot, under TCG), and the ext4 image, made with ``mkfs.ext4 -d``
so no loop mount and no privileges beyond file ownership are needed.

Nothing here is trusted blindly: :func:`missing_libraries` reads the ``DT_NEEDED`` entries of every
program and library, and the builder runs a few programs in a ``chroot`` before it accepts the tree.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from typing import Iterable, Sequence

from attrs import frozen

from vmservice.images.elf import ElfError, parse_elf

__all__ = [
    "BASE_DIRECTORIES",
    "LIBRARY_DIRS",
    "MissingLibrary",
    "RootfsError",
    "IDENTITY_LINKS",
    "add_base_files",
    "install_busybox_links",
    "install_guest_files",
    "make_ext4",
    "merge_usr",
    "missing_libraries",
    "prune",
    "tree_size",
]

MERGED_DIRS = ("bin", "sbin", "lib", "lib64")
LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib", "usr/lib64")
BASE_DIRECTORIES = {
    "dev": 0o755, "proc": 0o555, "sys": 0o555, "run": 0o755, "tmp": 0o1777, "root": 0o700, "home": 0o755,
    "mnt": 0o755, "var": 0o755, "var/tmp": 0o1777, "var/log": 0o755, "etc": 0o755, "etc/vmservice": 0o755,
    "opt/vmservice/bin": 0o755,
}
PRUNED = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian", "usr/share/locale",
          "usr/share/bug", "usr/share/menu")


class RootfsError(Exception):
    """
    The root file system cannot be assembled or fails a check.
    """


@frozen
class MissingLibrary:
    """
    An ELF file in the tree needs a shared library the tree does not have.

    :ivar path: the file, relative to the root (``usr/lib/python3.11/lib-dynload/_dbm....so``).
    :ivar soname: the library it needs (``libdb-5.3.so``).
    """

    path: str
    soname: str


def _merge_into(source: str, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(source):
        src = os.path.join(source, name)
        dst = os.path.join(target, name)
        if os.path.isdir(src) and not os.path.islink(src) and os.path.isdir(dst) and not os.path.islink(dst):
            _merge_into(src, dst)
        else:
            if os.path.lexists(dst):
                if os.path.isdir(dst) and not os.path.islink(dst):
                    raise RootfsError(f"cannot merge {src}: {dst} is a directory")
                os.unlink(dst)
            os.rename(src, dst)
    os.rmdir(source)


def merge_usr(root: str) -> None:
    """
    Move ``/bin``, ``/sbin``, ``/lib`` and ``/lib64`` into ``/usr`` and leave relative symbolic links in
    their place, as on a merged-``/usr`` Debian system. Files under ``/usr`` win over none: Debian 12
    packages never ship the same path in both.
    """
    for name in MERGED_DIRS:
        top = os.path.join(root, name)
        target = os.path.join(root, "usr", name)
        if os.path.islink(top):
            continue
        if os.path.isdir(top):
            _merge_into(top, target)
        else:
            os.makedirs(target, exist_ok=True)
        os.symlink(f"usr/{name}", top)


def prune(root: str) -> None:
    """
    Remove what a guest never reads: documentation, manual pages, translations, and the kernel image and
    symbol map (the kernel is booted from outside the disk). Keeps ``/boot/config-*``.
    """
    for relative in PRUNED:
        shutil.rmtree(os.path.join(root, relative), ignore_errors=True)
    boot = os.path.join(root, "boot")
    if os.path.isdir(boot):
        for name in os.listdir(boot):
            if not name.startswith("config-"):
                os.unlink(os.path.join(boot, name))


def install_busybox_links(root: str, applets: Iterable[str]) -> int:
    """
    Link busybox applets into ``/usr/bin`` and ``/usr/sbin`` unless a real program of that name exists in
    either (bash, tar and e2fsprogs stay the real thing). The links are relative (``../bin/busybox``), so
    they resolve the same from the initramfs, in a ``chroot`` and in the guest.

    :param applets: ``busybox --list-full`` output lines, such as ``sbin/init`` or ``usr/bin/awk``.
    :return: how many links were made.
    """
    made = 0
    for line in applets:
        line = line.strip()
        if not line:
            continue
        directory, _, name = line.rpartition("/")
        if not name or name in ("busybox",):
            continue
        kind = "sbin" if directory.endswith("sbin") else "bin"
        if any(os.path.lexists(os.path.join(root, "usr", d, name)) for d in ("bin", "sbin")):
            continue
        os.makedirs(os.path.join(root, "usr", kind), exist_ok=True)
        os.symlink("busybox" if kind == "bin" else "../bin/busybox", os.path.join(root, "usr", kind, name))
        made += 1
    return made


def _write(root: str, relative: str, data: bytes, mode: int) -> None:
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "wb") as stream:
        stream.write(data)
    os.chmod(path, mode)


#: The files a clone's identity rewrites, links into the guest's ``/run`` (a tmpfs), where its ``rc`` writes
#: ``hostname`` and ``hosts`` at boot and a clone's agent all three as it adopts its identity: no write to the
#: root file system on a clone's path (vmservice/guest/identity.py).  A guest never given a machine-id has none.
IDENTITY_LINKS = {
    "etc/hostname": "../run/vmservice/hostname",
    "etc/hosts": "../run/vmservice/hosts",
    "etc/machine-id": "../run/vmservice/machine-id",
}


def add_base_files(root: str) -> None:
    """
    The directories and ``/etc`` files a Debian system would get from ``base-files`` and ``base-passwd``:
    mount points, the root account, ``/etc/mtab`` (``resize2fs`` reads it to find where ``/`` is mounted),
    ``/etc/hostname``, ``/etc/hosts`` and ``/etc/machine-id`` as links into ``/run`` (:data:`IDENTITY_LINKS`)
    and the console and null device nodes for the moments before ``devtmpfs`` is mounted.
    """
    for relative, mode in BASE_DIRECTORIES.items():
        path = os.path.join(root, relative)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
    files = {
        "etc/passwd": b"root:x:0:0:root:/root:/bin/bash\n"
                       # The SSH server's privilege separation user (openssh-server's postinst makes it).
                       b"sshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n"
                       b"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        "etc/group": b"root:x:0:\ntty:x:5:\nnogroup:x:65534:\n",
        "etc/shadow": b"root:*:19000:0:99999:7:::\nsshd:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n",
        "etc/nsswitch.conf": b"passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
        "etc/ld.so.conf": b"include /etc/ld.so.conf.d/*.conf\n",
        "etc/shells": b"/bin/sh\n/bin/bash\n/usr/bin/bash\n",
        "etc/profile": b"export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
        "etc/os-release": b'PRETTY_NAME="vmservice guest (Debian 12)"\nNAME="vmservice guest"\nID=vmservice\n'
                          b"ID_LIKE=debian\nVERSION_ID=12\n",
    }
    for relative, data in files.items():
        _write(root, relative, data, 0o640 if relative == "etc/shadow" else 0o644)
    links = {"etc/mtab": "../proc/self/mounts", **IDENTITY_LINKS}
    for relative, target in links.items():
        link = os.path.join(root, relative)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target, link)
    for name, major, minor, mode in (("console", 5, 1, 0o600), ("null", 1, 3, 0o666)):
        node = os.path.join(root, "dev", name)
        if not os.path.lexists(node):
            os.mknod(node, stat.S_IFCHR | mode, os.makedev(major, minor))


def install_guest_files(root: str, package_root: str, guest_sources: Sequence[str]) -> None:
    """
    Copy our guest code and boot files into the tree.

    :param package_root: the ``vmservice`` package directory of the source tree.
    :param guest_sources: paths relative to it (from :func:`vmservice.images.recipe.guest_sources`):
        the modules of ``guest/`` and ``wire/`` (subpackages too) go below ``/opt/vmservice/vmservice/``,
        at the same relative paths; of ``guest/files/*``,
        ``inittab`` becomes ``/etc/inittab``, ``rc`` and ``shutdown`` go to ``/etc/vmservice/``, ``agent``
        and ``metrics`` (launchers) to ``/opt/vmservice/bin/``; ``init`` belongs to the initramfs.
    """
    placement = {
        "inittab": ("etc/inittab", 0o644),
        "rc": ("etc/vmservice/rc", 0o755),
        "shutdown": ("etc/vmservice/shutdown", 0o755),
        "agent": ("opt/vmservice/bin/agent", 0o755),
        "metrics": ("opt/vmservice/bin/metrics", 0o755),
    }
    for relative in guest_sources:
        with open(os.path.join(package_root, relative), "rb") as stream:
            data = stream.read()
        if relative.startswith("guest/files/"):
            name = relative[len("guest/files/"):]
            if name in placement:
                target, mode = placement[name]
                _write(root, target, data, mode)
        elif relative.endswith(".py"):
            _write(root, f"opt/vmservice/vmservice/{relative}", data, 0o644)
    for name in placement:
        target, _mode = placement[name]
        if not os.path.exists(os.path.join(root, target)):
            raise RootfsError(f"guest/files/{name} is missing from the source tree")


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as stream:
            return stream.read(4) == b"\x7fELF"
    except OSError:
        return False


def _resolve_in_root(root: str, path: str) -> str | None:
    """Follow symbolic links as the guest would see them; None if the target does not exist."""
    current = path
    for _ in range(40):
        if not os.path.islink(current):
            return current if os.path.exists(current) else None
        target = os.readlink(current)
        if target.startswith("/"):
            current = os.path.join(root, target.lstrip("/"))
        else:
            current = os.path.join(os.path.dirname(current), target)
    return None


def _runpath_dir(root: str, path: str, directory: str) -> str:
    """A ``DT_RUNPATH`` directory of the file ``path`` as a path in the tree: ``$ORIGIN`` is its directory."""
    origin = "/" + os.path.relpath(os.path.dirname(path), root)
    expanded = directory.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
    return os.path.join(root, os.path.normpath(expanded).lstrip("/"))


def missing_libraries(root: str, scan_dirs: Sequence[str] = ("usr/bin", "usr/sbin", "usr/lib/python3.11/lib-dynload")
                      ) -> list[MissingLibrary]:
    """
    Every ``DT_NEEDED`` library of the ELF files in ``scan_dirs`` and in the library directories that the
    tree lacks, looked up the way the dynamic loader would: in the file's ``DT_RUNPATH`` (sudo's
    ``/usr/libexec/sudo``), then in the default directories. Libraries found are checked in turn.
    """
    search = [os.path.join(root, d) for d in LIBRARY_DIRS]
    queue: list[str] = []
    for relative in scan_dirs:
        directory = os.path.join(root, relative)
        if os.path.isdir(directory):
            queue.extend(os.path.join(directory, name) for name in sorted(os.listdir(directory)))
    seen: set[str] = set()
    missing: list[MissingLibrary] = []
    while queue:
        path = _resolve_in_root(root, queue.pop(0))
        if path is None or path in seen or not os.path.isfile(path) or not _is_elf(path):
            continue
        seen.add(path)
        with open(path, "rb") as stream:
            try:
                info = parse_elf(stream.read())
            except ElfError:
                continue
        own = [_runpath_dir(root, path, directory) for directory in info.runpath]
        for soname in info.needed:
            found = None
            for directory in [*own, *search]:
                candidate = _resolve_in_root(root, os.path.join(directory, soname))
                if candidate is not None:
                    found = candidate
                    break
            if found is None:
                missing.append(MissingLibrary(os.path.relpath(path, root), soname))
            else:
                queue.append(found)
    return missing


def tree_size(root: str, block: int = 4096) -> int:
    """
    The bytes the tree takes in a file system of ``block``-byte blocks: each file rounded up to whole
    blocks, one block per directory and symbolic link (hard links counted once).
    """
    total = 0
    inodes: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        total += block
        for name in dirnames + filenames:
            info = os.lstat(os.path.join(dirpath, name))
            if (info.st_dev, info.st_ino) in inodes:
                continue
            inodes.add((info.st_dev, info.st_ino))
            if stat.S_ISREG(info.st_mode):
                total += -(-info.st_size // block) * block
            elif not stat.S_ISDIR(info.st_mode):
                total += block
    return total


def make_ext4(root: str, image: str, headroom_mib: int, label: str = "vmservice-root") -> int:
    """
    Write ``image``, a raw ext4 file system holding ``root``, sized to the content plus ext4's own
    overhead (journal, inode tables: about 10 %) plus ``headroom_mib`` of free space. The file is sparse.
    Its inode tables and journal are initialized (not left to the guest's kernel, see the comment below).

    :return: the size of the image in bytes.
    """
    content = tree_size(root)
    journal = 16 * 1024 * 1024
    size_mib = -(-(content * 11 // 10 + journal) // (1024 * 1024)) + headroom_mib
    with open(image, "wb") as stream:
        stream.truncate(size_mib * 1024 * 1024)
    result = subprocess.run(
        # Inode tables and journal written now: otherwise the guest's kernel zeroes them in the background
        # (ext4lazyinit) after every boot, and a clone of a template goes on with it after its adoption.
        ["mkfs.ext4", "-q", "-F", "-L", label, "-E", "lazy_itable_init=0,lazy_journal_init=0", "-d", root, image],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if result.returncode != 0:
        raise RootfsError(f"mkfs.ext4 failed ({result.returncode}): {result.stdout.strip()}")
    return size_mib * 1024 * 1024
