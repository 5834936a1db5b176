# -*- test-case-name: tests.images.test_build -*-
"""
Tests for :mod:`vmservice.images.build` that do not fetch packages (the full build runs in
:mod:`tests.integration.images.test_boot`; the command line is tested in :mod:`tests.images.test_main`).
"""

from __future__ import annotations

import os
from typing import Sequence

from twisted.trial.unittest import SynchronousTestCase

from tests.images.fakes import fake_image, refuse
from vmservice.images.build import BuildError, build_image, has_ssh_server, prune_builds
from vmservice.images.debian import AptError
from vmservice.images.recipe import load_recipe, recipe_hash


class UpToDateTests(SynchronousTestCase):
    """
    An existing build of the current recipe is reused.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        self.current = f"default-{recipe_hash(load_recipe('default'))}"
        fake_image(os.path.join(self.base, self.current))
        self.lines: list[str] = []

    def test_up_to_date(self) -> None:
        """
        Nothing is run, "up to date" is printed, and the link is created pointing at the build.
        """
        image = build_image(self.base, out=self.lines.append, run=refuse)
        self.assertEqual(os.readlink(os.path.join(self.base, "default")), self.current)
        self.assertEqual(image.path.path, os.path.join(self.base, self.current))
        self.assertEqual(len(self.lines), 1)
        self.assertIn("up to date", self.lines[0])

    def test_link_moved_back(self) -> None:
        """
        If the link points at another build (made from other sources), it is moved to the current one.
        """
        fake_image(os.path.join(self.base, "default-0000000000000000"))
        os.symlink("default-0000000000000000", os.path.join(self.base, "default"))
        build_image(self.base, out=self.lines.append, run=refuse)
        self.assertEqual(os.readlink(os.path.join(self.base, "default")), self.current)
        self.assertIn("link updated", self.lines[0])


class FailureTests(SynchronousTestCase):
    """
    A failed build leaves nothing behind.
    """

    def test_apt_failure(self) -> None:
        """
        When apt fails, BuildError says so, and neither a build directory, a temporary directory nor a
        link remains.
        """
        base = os.path.abspath(self.mktemp())

        def broken(argv: Sequence[str], cwd: str | None) -> str:
            raise AptError("E: Unable to locate package linux-image-cloud-amd64")

        error = self.assertRaises(BuildError, build_image, base, out=lambda line: None, run=broken)
        self.assertIn("Unable to locate package", str(error))
        self.assertEqual([name for name in os.listdir(base) if name != ".default.lock"], [])


    def test_resolution_failure(self) -> None:
        """
        A recipe with resolve_dependencies asks apt for the dependencies of its packages (not of the
        kernel) after resolving the kernel; a failure there is a BuildError that names the step.
        """
        base = os.path.abspath(self.mktemp())
        commands: list[list[str]] = []

        def apt(argv: Sequence[str], cwd: str | None) -> str:
            commands.append(list(argv))
            if argv[:2] == ["apt-cache", "depends"] and "--recurse" not in argv:
                return "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-56-cloud-amd64\n"
            if list(argv) == ["dpkg", "--print-architecture"]:
                return "amd64\n"
            return "git\n  Depends: <nothing-provides-this>\n"

        error = self.assertRaises(BuildError, build_image, base, "dev", out=lambda line: None, run=apt)
        self.assertIn("fetching packages: git depends on nothing-provides-this", str(error))
        recursive = commands[-1]
        self.assertEqual(recursive[:3], ["apt-cache", "depends", "--recurse"])
        self.assertIn("openssh-server", recursive)
        self.assertNotIn("linux-image-6.1.0-56-cloud-amd64", recursive)
        self.assertEqual([name for name in os.listdir(base) if name != ".dev.lock"], [])


class SshServerTests(SynchronousTestCase):
    def test_has_ssh_server(self) -> None:
        """
        The manifest's ssh_server is whether /usr/sbin/sshd is an executable file in the tree.
        """
        root = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(root, "usr/sbin"))
        self.assertFalse(has_ssh_server(root))
        sshd = os.path.join(root, "usr/sbin/sshd")
        with open(sshd, "w"):
            pass
        self.assertFalse(has_ssh_server(root))
        os.chmod(sshd, 0o755)
        self.assertTrue(has_ssh_server(root))


class PruneTests(SynchronousTestCase):
    """
    :func:`prune_builds`.
    """

    def test_prune(self) -> None:
        """
        Beyond the current build and the two newest others, old builds go, except one with a file open;
        directories that are not builds of this image stay.
        """
        base = os.path.abspath(self.mktemp())
        names = [f"default-{index:016x}" for index in range(6)]
        for index, name in enumerate(names):
            fake_image(os.path.join(base, name))
            os.utime(os.path.join(base, name), (1000 + index, 1000 + index))
        os.symlink(names[0], os.path.join(base, "default"))
        fake_image(os.path.join(base, "other-0000000000000000"))
        fake_image(os.path.join(base, "default-notahash"))
        held = open(os.path.join(base, names[1], "rootfs.ext4"), "rb")
        self.addCleanup(held.close)
        removed = prune_builds(base, "default", keep=2)
        self.assertEqual(sorted(removed), [names[2], names[3]])
        self.assertEqual(sorted(os.listdir(base)),
                         sorted(["default", names[0], names[1], names[4], names[5], "other-0000000000000000",
                                 "default-notahash"]))
        self.assertEqual(prune_builds(base, "default", keep=2), [])
