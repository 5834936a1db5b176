# -*- test-case-name: tests.images.oci.test_paths -*-
"""
Tests for :mod:`vmservice.images.oci.paths`: paths resolved inside a tree.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from vmservice.images.oci import OciError, resolve_inside


class ResolveInsideTests(SynchronousTestCase):
    """
    :func:`resolve_inside`.
    """

    def test_resolution(self) -> None:
        """
        Links resolve with the tree as ``/``; the result never leaves it.
        """
        root = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(root, "usr/sbin"))
        os.symlink("usr/sbin", os.path.join(root, "sbin"))
        os.symlink("/usr", os.path.join(root, "abs"))
        os.symlink("../../../../..", os.path.join(root, "usr/up"))
        self.assertEqual(resolve_inside(root, "sbin/init", follow_last=False), os.path.join(root, "usr/sbin/init"))
        self.assertEqual(resolve_inside(root, "abs/sbin"), os.path.join(root, "usr/sbin"))
        self.assertEqual(resolve_inside(root, "usr/up/etc"), os.path.join(root, "etc"))
        self.assertEqual(resolve_inside(root, "sbin", follow_last=False), os.path.join(root, "sbin"))

    def test_loop(self) -> None:
        """
        A loop of links is an error, not a hang.
        """
        root = os.path.abspath(self.mktemp())
        os.makedirs(root)
        os.symlink("b", os.path.join(root, "a"))
        os.symlink("a", os.path.join(root, "b"))
        self.assertRaises(OciError, resolve_inside, root, "a/x")
