# -*- test-case-name: tests.images.test_postinst -*-
"""
Tests for :mod:`vmservice.images.postinst`: the results of maintainer scripts, on small trees.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from tests.images.rootfs_tree import read, write
from vmservice.images.postinst import (add_system_users, install_alternatives, secure_sudoers,
                                       select_ca_certificates, write_pam_stacks)
from vmservice.images.rootfs import add_base_files


class PostinstTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.root = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(self.root, "usr/bin"))
        os.makedirs(os.path.join(self.root, "usr/sbin"))

    def touch(self, relative: str, data: str = "") -> None:
        path = os.path.join(self.root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as stream:
            stream.write(data)

    def read(self, relative: str) -> str:
        with open(os.path.join(self.root, relative)) as stream:
            return stream.read()

    def test_alternatives(self) -> None:
        """
        cc points at gcc and awk at gawk by relative links; a name a package ships is kept; a name without
        a candidate is not made.
        """
        self.touch("usr/bin/gcc")
        self.touch("usr/bin/gawk")
        self.touch("usr/bin/mawk")
        self.touch("usr/bin/pager", "mine")
        made = install_alternatives(self.root)
        self.assertIn("usr/bin/cc -> usr/bin/gcc", made)
        self.assertIn("usr/bin/awk -> usr/bin/gawk", made)
        self.assertEqual(os.readlink(os.path.join(self.root, "usr/bin/cc")), "gcc")
        self.assertEqual(self.read("usr/bin/pager"), "mine")
        self.assertFalse(os.path.lexists(os.path.join(self.root, "usr/bin/c++")))
        self.assertEqual(install_alternatives(self.root), [])

    def test_sshd_user(self) -> None:
        """
        With the SSH server in the tree, the sshd user is added once (the base files may have it already),
        with a free id below 1000, nogroup, /run/sshd and nologin, and a locked password; without it,
        nobody is added.
        """
        self.touch("etc/passwd", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:100:100::/:/bin/false\n")
        self.touch("etc/shadow", "root:*:19000:0:99999:7:::\n")
        self.assertEqual(add_system_users(self.root), [])
        self.touch("usr/sbin/sshd")
        self.touch("usr/sbin/nologin")
        self.assertEqual(add_system_users(self.root), ["sshd"])
        self.assertIn("sshd:x:101:65534::/run/sshd:/usr/sbin/nologin\n", self.read("etc/passwd"))
        self.assertIn("sshd:!:", self.read("etc/shadow"))
        self.assertEqual(add_system_users(self.root), [])
        add_base_files(self.root)
        self.assertEqual(add_system_users(self.root), [])
        self.assertEqual(len([line for line in self.read("etc/passwd").splitlines() if line.startswith("sshd:")]), 1)

    def test_ca_certificates(self) -> None:
        """
        Every certificate below /usr/share/ca-certificates is selected, by its relative path; without
        certificates nothing is written.
        """
        self.assertEqual(select_ca_certificates(self.root), 0)
        self.touch("usr/share/ca-certificates/mozilla/B.crt")
        self.touch("usr/share/ca-certificates/mozilla/A.crt")
        self.touch("usr/share/ca-certificates/mozilla/README")
        os.makedirs(os.path.join(self.root, "etc"))
        self.assertEqual(select_ca_certificates(self.root), 2)
        lines = [line for line in self.read("etc/ca-certificates.conf").splitlines() if not line.startswith("#")]
        self.assertEqual(lines, ["mozilla/A.crt", "mozilla/B.crt"])


_UNIX = """Name: Unix authentication
Default: yes
Priority: 256
Auth-Type: Primary
Auth:
\t[success=end default=ignore]\tpam_unix.so nullok try_first_pass
Auth-Initial:
\t[success=end default=ignore]\tpam_unix.so nullok
Account-Type: Primary
Account:
\t[success=end new_authtok_reqd=done default=ignore]\tpam_unix.so
Session-Type: Additional
Session:
\trequired\tpam_unix.so
"""
_CAPABILITY = "Name: caps\nDefault: yes\nPriority: 0\nAuth-Type: Additional\nAuth-Final:\n\toptional\tpam_cap.so\n"
_INTERACTIVE = ("Name: logind\nDefault: yes\nPriority: 0\nSession-Interactive-Only: yes\nSession-Type: Additional\n"
                "Session:\n\toptional\tpam_systemd.so\n")
_TEMPLATE = "# {stack}\n${name}_primary\n{kind}\trequisite\tpam_deny.so\n{kind}\trequired\tpam_permit.so\n${name}_additional\n"


class PamStackTests(SynchronousTestCase):
    """The PAM stacks ``pam-auth-update`` would write, and sudo's ``/etc/sudoers``, on small trees."""

    def setUp(self) -> None:
        self.root = os.path.abspath(self.mktemp())
        os.makedirs(self.root)

    def touch(self, relative: str, data: str = "") -> None:
        write(self.root, relative, data.encode())

    def lines(self, relative: str) -> list[str]:
        return [" ".join(line.split()) for line in read(self.root, relative).splitlines() if not line.startswith("#")]

    def test_stacks(self) -> None:
        """
        Primary modules skip past pam_deny on success (the first in its Initial form), Additional ones
        follow (the last in its Final form), interactive-only ones stay out of the noninteractive stack,
        and a stack without a Primary module steps over pam_deny all the same.
        """
        for stack, name in (("auth", "auth"), ("account", "account"), ("session", "session"),
                            ("session-noninteractive", "session_nonint")):
            self.touch(f"usr/share/pam/common-{stack}", _TEMPLATE.format(stack=stack, name=name,
                                                                         kind=stack.split("-")[0]))
        self.touch("usr/share/pam-configs/unix", _UNIX)
        self.touch("usr/share/pam-configs/capability", _CAPABILITY)
        self.touch("usr/share/pam-configs/logind", _INTERACTIVE)
        self.touch("etc/pam.d/common-account", "mine\n")
        self.assertEqual(write_pam_stacks(self.root), ["auth", "session", "session-noninteractive"])
        self.assertEqual(self.lines("etc/pam.d/common-auth"), [
            "auth [success=1 default=ignore] pam_unix.so nullok", "auth requisite pam_deny.so",
            "auth required pam_permit.so", "auth optional pam_cap.so"])
        self.assertEqual(self.lines("etc/pam.d/common-account"), ["mine"])
        self.assertEqual(self.lines("etc/pam.d/common-session"), [
            "session [default=1] pam_permit.so", "session requisite pam_deny.so", "session required pam_permit.so",
            "session required pam_unix.so", "session optional pam_systemd.so"])
        self.assertEqual(self.lines("etc/pam.d/common-session-noninteractive")[-1], "session required pam_unix.so")

    def test_without_templates(self) -> None:
        """A tree without libpam-runtime's templates gets no stack."""
        self.touch("usr/share/pam-configs/unix", _UNIX)
        self.assertEqual(write_pam_stacks(self.root), [])
        self.assertFalse(os.path.exists(os.path.join(self.root, "etc/pam.d")))

    def test_sudoers(self) -> None:
        """/etc/sudoers, shipped 0644, becomes 0440 as sudo's postinst leaves it; no sudoers, nothing."""
        self.assertFalse(secure_sudoers(self.root))
        self.touch("etc/sudoers", "root ALL=(ALL:ALL) ALL\n")
        os.chmod(os.path.join(self.root, "etc/sudoers"), 0o644)
        self.assertTrue(secure_sudoers(self.root))
        self.assertEqual(os.stat(os.path.join(self.root, "etc/sudoers")).st_mode & 0o7777, 0o440)
