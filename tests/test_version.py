# -*- test-case-name: tests.test_version -*-
"""
Tests for :mod:`vmservice.version`: the commit read from a ``.git``
directory without running git, and Go's names for this platform.  What
``GET /info`` makes of them is tested in :mod:`tests.api.test_app`.
"""

from __future__ import annotations

import os
import platform

from twisted.trial.unittest import SynchronousTestCase

from vmservice import __version__, version

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


class GitCommitTests(SynchronousTestCase):
    """:func:`version.git_commit` on made-up checkouts."""

    def checkout(self, head: str, refs: dict[str, str] | None = None, packed: str | None = None) -> str:
        """A directory with a ``.git`` of ``HEAD``, loose ``refs`` and ``packed-refs``; a directory inside it."""
        root = os.path.abspath(self.mktemp())
        git = os.path.join(root, ".git")
        os.makedirs(git)
        with open(os.path.join(git, "HEAD"), "w") as f:
            f.write(head)
        for name, sha in (refs or {}).items():
            os.makedirs(os.path.dirname(os.path.join(git, name)), exist_ok=True)
            with open(os.path.join(git, name), "w") as f:
                f.write(sha + "\n")
        if packed is not None:
            with open(os.path.join(git, "packed-refs"), "w") as f:
                f.write(packed)
        inside = os.path.join(root, "vmservice", "api")
        os.makedirs(inside)
        return inside

    def test_loose_ref(self) -> None:
        """HEAD naming a branch gives the commit of its loose ref, found from a directory deep inside."""
        start = self.checkout("ref: refs/heads/main\n", {"refs/heads/main": SHA})
        self.assertEqual(version.git_commit(start), SHA)

    def test_packed_ref(self) -> None:
        """A branch that is only in packed-refs is found there."""
        packed = f"# pack-refs with: peeled fully-peeled sorted\n{OTHER} refs/heads/other\n{SHA} refs/heads/main\n"
        self.assertEqual(version.git_commit(self.checkout("ref: refs/heads/main\n", packed=packed)), SHA)

    def test_detached(self) -> None:
        """A detached HEAD is the commit itself."""
        self.assertEqual(version.git_commit(self.checkout(SHA + "\n")), SHA)

    def test_unknown(self) -> None:
        """A branch found nowhere, an empty HEAD, or no checkout at all give "unknown"."""
        self.assertEqual(version.git_commit(self.checkout("ref: refs/heads/gone\n", packed="")), "unknown")
        self.assertEqual(version.git_commit(self.checkout("ref: refs/heads/gone\n")), "unknown")
        self.assertEqual(version.git_commit(self.checkout("")), "unknown")
        self.assertEqual(version.git_commit("/"), "unknown")


class PlatformTests(SynchronousTestCase):
    """:func:`version.go_platform`."""

    def test_go_names(self) -> None:
        """Linux machines get Go's GOOS and GOARCH; an unknown machine keeps its own name."""
        self.patch(platform, "system", lambda: "Linux")
        for machine, goarch in (("x86_64", "amd64"), ("aarch64", "arm64"), ("armv7l", "arm"), ("i686", "386"),
                                ("riscv64", "riscv64")):
            self.patch(platform, "machine", lambda: machine)
            self.assertEqual(version.go_platform(), ("linux", goarch))

    def test_version(self) -> None:
        """The package version is offered here too."""
        self.assertEqual(version.__version__, __version__)
