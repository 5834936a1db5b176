# -*- test-case-name: tests.images.test_rootfs -*-
"""
Tests for :mod:`vmservice.images.rootfs`, on small trees made in the test.  The ext4 image made with the
real ``mkfs.ext4`` is tested in :mod:`tests.integration.images.test_rootfs`.
"""

from __future__ import annotations

import os
import shutil

from twisted.trial.unittest import SynchronousTestCase

from tests.images.elfs import make_elf
from tests.images.rootfs_tree import write
from vmservice.images.recipe import guest_sources, package_root
from vmservice.images.rootfs import (MissingLibrary, RootfsError, add_base_files, install_busybox_links,
                                     install_guest_files, merge_usr, missing_libraries, prune)


class TreeTests(SynchronousTestCase):
    """
    Assembling the tree.
    """

    def setUp(self) -> None:
        self.root = os.path.abspath(self.mktemp())
        os.makedirs(self.root)

    def test_merge_usr(self) -> None:
        """
        /bin, /sbin, /lib and /lib64 move into /usr, merging with what is there, and become relative links.
        """
        write(self.root, "bin/bash", b"bash")
        write(self.root, "lib/x86_64-linux-gnu/libc.so.6", b"libc")
        write(self.root, "usr/lib/x86_64-linux-gnu/libz.so.1", b"z")
        os.makedirs(os.path.join(self.root, "lib64"))
        os.symlink("/lib/x86_64-linux-gnu/libc.so.6", os.path.join(self.root, "lib64/ld-linux-x86-64.so.2"))
        merge_usr(self.root)
        for name in ("bin", "sbin", "lib", "lib64"):
            self.assertEqual(os.readlink(os.path.join(self.root, name)), f"usr/{name}")
        self.assertEqual(open(os.path.join(self.root, "usr/bin/bash"), "rb").read(), b"bash")
        self.assertEqual(sorted(os.listdir(os.path.join(self.root, "usr/lib/x86_64-linux-gnu"))),
                         ["libc.so.6", "libz.so.1"])
        self.assertEqual(os.readlink(os.path.join(self.root, "usr/lib64/ld-linux-x86-64.so.2")),
                         "/lib/x86_64-linux-gnu/libc.so.6")

    def test_merge_conflict(self) -> None:
        """
        A file in /lib where /usr/lib has a directory of that name cannot be merged.
        """
        write(self.root, "lib/thing", b"file")
        write(self.root, "usr/lib/thing/inside", b"")
        self.assertRaises(RootfsError, merge_usr, self.root)

    def test_busybox_links(self) -> None:
        """
        Applets become relative links to busybox unless a real program of that name exists in /usr/bin or
        /usr/sbin; busybox itself is left alone.
        """
        write(self.root, "usr/bin/busybox", b"bb")
        write(self.root, "usr/bin/tar", b"real tar")
        write(self.root, "usr/sbin/resize2fs", b"real")
        made = install_busybox_links(self.root, ["bin/sh", "sbin/init", "usr/bin/tar", "bin/resize2fs",
                                                  "bin/busybox", "", "usr/sbin/chroot"])
        self.assertEqual(made, 3)
        self.assertEqual(os.readlink(os.path.join(self.root, "usr/bin/sh")), "busybox")
        self.assertEqual(os.readlink(os.path.join(self.root, "usr/sbin/init")), "../bin/busybox")
        self.assertEqual(os.readlink(os.path.join(self.root, "usr/sbin/chroot")), "../bin/busybox")
        self.assertFalse(os.path.islink(os.path.join(self.root, "usr/bin/tar")))
        self.assertFalse(os.path.lexists(os.path.join(self.root, "usr/bin/resize2fs")))

    def test_prune(self) -> None:
        """
        Documentation and the kernel image go; the kernel config stays.
        """
        write(self.root, "usr/share/doc/bash/README", b"")
        write(self.root, "boot/vmlinuz-6.1", b"")
        write(self.root, "boot/config-6.1", b"")
        write(self.root, "usr/share/python3/x", b"")
        prune(self.root)
        self.assertFalse(os.path.exists(os.path.join(self.root, "usr/share/doc")))
        self.assertEqual(os.listdir(os.path.join(self.root, "boot")), ["config-6.1"])
        self.assertTrue(os.path.exists(os.path.join(self.root, "usr/share/python3/x")))

    def test_base_files(self) -> None:
        """
        The root account, mount points, /etc/mtab and the console node exist afterwards; /etc/hostname,
        /etc/hosts and /etc/machine-id are links into /run/vmservice.
        """
        add_base_files(self.root)
        self.assertTrue(open(os.path.join(self.root, "etc/passwd")).read().startswith("root:x:0:0:"))
        self.assertEqual(os.readlink(os.path.join(self.root, "etc/mtab")), "../proc/self/mounts")
        for name in ("hostname", "hosts", "machine-id"):
            self.assertEqual(os.readlink(os.path.join(self.root, "etc", name)), f"../run/vmservice/{name}")
        self.assertEqual(os.stat(os.path.join(self.root, "tmp")).st_mode & 0o7777, 0o1777)
        console = os.stat(os.path.join(self.root, "dev/console"))
        self.assertEqual((os.major(console.st_rdev), os.minor(console.st_rdev)), (5, 1))

    def test_guest_files(self) -> None:
        """
        The guest modules land under /opt/vmservice, the boot files in /etc and the launchers in
        /opt/vmservice/bin, executable.
        """
        install_guest_files(self.root, package_root(), guest_sources())
        self.assertTrue(os.path.isfile(os.path.join(self.root, "opt/vmservice/vmservice/__init__.py")))
        self.assertTrue(os.path.isfile(os.path.join(self.root, "opt/vmservice/vmservice/guest/powerbutton.py")))
        self.assertTrue(os.path.isfile(os.path.join(self.root, "opt/vmservice/vmservice/wire/__init__.py")))
        self.assertIn("::sysinit:/etc/vmservice/rc", open(os.path.join(self.root, "etc/inittab")).read())
        agent = os.path.join(self.root, "opt/vmservice/bin/agent")
        self.assertTrue(os.access(agent, os.X_OK))
        self.assertIn("from vmservice.guest.agent import main; main()", open(agent).read())
        self.assertTrue(os.access(os.path.join(self.root, "etc/vmservice/shutdown"), os.X_OK))
        self.assertFalse(os.path.exists(os.path.join(self.root, "etc/vmservice/init")))

    def test_guest_subpackages(self) -> None:
        """
        A module of a subpackage of vmservice/guest lands below /opt/vmservice/vmservice at the same
        relative path.
        """
        source = os.path.abspath(self.mktemp())
        shutil.copytree(package_root(), source, ignore=shutil.ignore_patterns("__pycache__"))
        os.makedirs(os.path.join(source, "guest", "sub", "deeper"))
        for relative in ("guest/sub/__init__.py", "guest/sub/deeper/module.py"):
            with open(os.path.join(source, relative), "wb") as stream:
                stream.write(b"# " + relative.encode())
        install_guest_files(self.root, source, guest_sources(source))
        for relative in ("guest/sub/__init__.py", "guest/sub/deeper/module.py"):
            with open(os.path.join(self.root, "opt/vmservice/vmservice", relative), "rb") as stream:
                self.assertEqual(stream.read(), b"# " + relative.encode())

    def test_guest_files_missing(self) -> None:
        """
        A source tree without one of the boot files is an error, not an image that cannot boot.
        """
        self.assertRaises(RootfsError, install_guest_files, self.root, package_root(),
                          [s for s in guest_sources() if s != "guest/files/inittab"])


class LibraryTests(SynchronousTestCase):
    """
    :func:`missing_libraries`.
    """

    def setUp(self) -> None:
        self.root = os.path.abspath(self.mktemp())
        write(self.root, "usr/lib/x86_64-linux-gnu/libc.so.6", make_elf(e_type=3))
        write(self.root, "usr/lib/x86_64-linux-gnu/libz.so.1.2.13", make_elf(needed=("libc.so.6",), e_type=3))
        os.symlink("libz.so.1.2.13", os.path.join(self.root, "usr/lib/x86_64-linux-gnu/libz.so.1"))
        write(self.root, "usr/lib/x86_64-linux-gnu/libssl.so.3", make_elf(needed=("libcrypto.so.3",), e_type=3))
        write(self.root, "usr/bin/python3.11", make_elf(needed=("libz.so.1", "libc.so.6")))
        write(self.root, "usr/bin/script", b"#!/bin/sh\n")
        os.symlink("python3.11", os.path.join(self.root, "usr/bin/python3"))

    def test_complete(self) -> None:
        """
        Programs whose libraries, and the libraries' own, are all present need nothing; scripts and
        links are fine.
        """
        self.assertEqual(missing_libraries(self.root, ("usr/bin",)), [])

    def test_runpath(self) -> None:
        """
        A library in the program's DT_RUNPATH (sudo's /usr/libexec/sudo, or $ORIGIN-relative) is found
        there; without the run path it is missing.
        """
        write(self.root, "usr/libexec/sudo/libsudo_util.so.0", make_elf(needed=("libc.so.6",), e_type=3))
        write(self.root, "usr/bin/sudo", make_elf(needed=("libsudo_util.so.0",), runpath="/usr/libexec/sudo"))
        write(self.root, "usr/bin/visudo", make_elf(needed=("libsudo_util.so.0",), runpath="$ORIGIN/../libexec/sudo"))
        self.assertEqual(missing_libraries(self.root, ("usr/bin",)), [])
        write(self.root, "usr/bin/other", make_elf(needed=("libsudo_util.so.0",)))
        self.assertEqual(missing_libraries(self.root, ("usr/bin",)),
                         [MissingLibrary("usr/bin/other", "libsudo_util.so.0")])

    def test_missing_transitively(self) -> None:
        """
        A library needed by a library is reported against the library that needs it.
        """
        write(self.root, "usr/lib/python3.11/lib-dynload/_ssl.so", make_elf(needed=("libssl.so.3",), e_type=3))
        self.assertEqual(missing_libraries(self.root, ("usr/lib/python3.11/lib-dynload",)),
                         [MissingLibrary("usr/lib/x86_64-linux-gnu/libssl.so.3", "libcrypto.so.3")])

    def test_dangling_link(self) -> None:
        """
        A soname link whose target is gone counts as missing.
        """
        os.unlink(os.path.join(self.root, "usr/lib/x86_64-linux-gnu/libz.so.1.2.13"))
        self.assertEqual(missing_libraries(self.root, ("usr/bin",)),
                         [MissingLibrary("usr/bin/python3.11", "libz.so.1")])
