# -*- test-case-name: tests.images.test_accounts -*-
"""
Tests for :mod:`vmservice.images.accounts`: a recipe's accounts made in a small tree.
"""

from __future__ import annotations

import os
import stat

from twisted.trial.unittest import SynchronousTestCase

from tests.images.rootfs_tree import read, write
from vmservice.images.accounts import AccountError, add_accounts
from vmservice.images.recipe import Account
from vmservice.images.rootfs import add_base_files

_USER = Account("user", 1000, 1000, "/home/user", "/bin/bash", sudo=True)


class AccountsTests(SynchronousTestCase):
    """Accounts in a tree with the base files, bash, ``/etc/skel`` and sudo's ``/etc/sudoers``."""

    def setUp(self) -> None:
        if os.getuid() != 0:
            # Owners cannot be given away otherwise; the image builder runs as root.
            raise self.skipTest("making files of another owner needs root")
        self.root = os.path.abspath(self.mktemp())
        os.makedirs(self.root)
        add_base_files(self.root)
        self.touch("bin/bash")
        self.touch("etc/skel/.profile", "# profile\n")
        self.touch("etc/skel/.config/app", "x\n")
        self.touch("etc/sudoers", "root ALL=(ALL:ALL) ALL\n@includedir /etc/sudoers.d\n")

    def touch(self, relative: str, data: str = "") -> None:
        write(self.root, relative, data.encode())

    def read(self, relative: str) -> str:
        return read(self.root, relative)

    def test_made(self) -> None:
        """
        The account's group, passwd and shadow lines (no password matches ``*``), its home from /etc/skel
        owned by it and 0750, and its sudoers drop-in (0440, NOPASSWD: ALL).
        """
        self.assertEqual(add_accounts(self.root, [_USER]), ["user"])
        self.assertIn("user:x:1000:1000::/home/user:/bin/bash\n", self.read("etc/passwd"))
        self.assertIn("user:x:1000:\n", self.read("etc/group"))
        self.assertIn("user:*:19000:0:99999:7:::\n", self.read("etc/shadow"))
        home = os.lstat(os.path.join(self.root, "home/user"))
        self.assertEqual((home.st_uid, home.st_gid, stat.S_IMODE(home.st_mode)), (1000, 1000, 0o750))
        for relative in (".profile", ".config", ".config/app"):
            info = os.lstat(os.path.join(self.root, "home/user", relative))
            self.assertEqual((info.st_uid, info.st_gid), (1000, 1000), relative)
        self.assertEqual(self.read("home/user/.profile"), "# profile\n")
        drop_in = os.path.join(self.root, "etc/sudoers.d/user")
        self.assertEqual(stat.S_IMODE(os.lstat(drop_in).st_mode), 0o440)
        self.assertIn("\nuser ALL=(ALL:ALL) NOPASSWD: ALL\n", self.read("etc/sudoers.d/user"))

    def test_without_sudo(self) -> None:
        """An account without sudo gets no drop-in; a group of its name and id already there is kept."""
        self.touch("etc/group", "root:x:0:\nstaff:x:50:\n")
        add_accounts(self.root, [Account("staff", 1001, 50, "/srv/staff", "/bin/bash")])
        self.assertEqual(self.read("etc/group"), "root:x:0:\nstaff:x:50:\n")
        self.assertFalse(os.path.exists(os.path.join(self.root, "etc/sudoers.d/staff")))
        self.assertEqual(os.lstat(os.path.join(self.root, "srv")).st_uid, 0)
        self.assertEqual(os.lstat(os.path.join(self.root, "srv/staff")).st_uid, 1001)

    def test_taken(self) -> None:
        """A name or user id in /etc/passwd, or a group id of another group, is refused."""
        for account, reason in ((Account("root", 1000, 1000, "/home/r", "/bin/bash"), "already exists"),
                                (Account("other", 100, 1000, "/home/o", "/bin/bash"), "user id 100"),
                                (Account("other", 1000, 65534, "/home/o", "/bin/bash"), "clashes with nogroup"),
                                (Account("nogroup", 1000, 1000, "/home/o", "/bin/bash"), "clashes with nogroup")):
            self.assertIn(reason, str(self.assertRaises(AccountError, add_accounts, self.root, [account])))

    def test_missing_shell_and_sudo(self) -> None:
        """A shell the tree lacks, or sudo in a tree without /etc/sudoers (or one not reading sudoers.d)."""
        error = self.assertRaises(AccountError, add_accounts, self.root,
                                  [Account("user", 1000, 1000, "/home/user", "/bin/zsh")])
        self.assertIn("shell /bin/zsh", str(error))
        self.touch("etc/sudoers", "root ALL=(ALL:ALL) ALL\n")
        self.assertIn("does not include", str(self.assertRaises(AccountError, add_accounts, self.root, [_USER])))
        os.unlink(os.path.join(self.root, "etc/sudoers"))
        self.assertIn("no /etc/sudoers", str(self.assertRaises(AccountError, add_accounts, self.root, [_USER])))

    def test_home_through_link(self) -> None:
        """A home whose path meets a symbolic link (out of the tree) is refused, nothing made outside."""
        outside = os.path.abspath(self.mktemp())
        os.makedirs(outside)
        os.rmdir(os.path.join(self.root, "home"))
        os.symlink(outside, os.path.join(self.root, "home"))
        error = self.assertRaises(AccountError, add_accounts, self.root, [_USER])
        self.assertIn("/home is a symbolic link", str(error))
        self.assertEqual(os.listdir(outside), [])
