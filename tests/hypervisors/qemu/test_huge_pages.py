# -*- test-case-name: tests.hypervisors.qemu.test_huge_pages -*-
"""Tests for :mod:`vmservice.hypervisors.qemu.huge_pages`, with a fake ``prctl``."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice.hypervisors.qemu.huge_pages import PR_SET_THP_DISABLE, refuse_transparent_huge_pages


class RefuseTransparentHugePagesTests(SynchronousTestCase):
    def test_sets_thp_disable(self) -> None:
        """It asks ``prctl`` to set ``PR_SET_THP_DISABLE`` (41) and says the kernel took it."""
        calls: list[tuple[int, ...]] = []

        def prctl(*args: int) -> int:
            calls.append(args)
            return 0

        self.assertTrue(refuse_transparent_huge_pages(prctl))
        self.assertEqual(calls, [(41, 1, 0, 0, 0)])
        self.assertEqual(PR_SET_THP_DISABLE, 41)

    def test_refused(self) -> None:
        """A kernel that refuses it (``prctl`` returns -1) is reported, not raised."""
        self.assertFalse(refuse_transparent_huge_pages(lambda *args: -1))
