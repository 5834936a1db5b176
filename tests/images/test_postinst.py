# -*- test-case-name: tests.images.test_postinst -*-
"""
Tests for :mod:`vmservice.images.postinst`: the results of maintainer scripts, on small trees.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from vmservice.images.postinst import add_system_users, install_alternatives, select_ca_certificates
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
