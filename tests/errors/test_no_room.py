# -*- test-case-name: tests.errors.test_no_room -*-
"""Tests for :mod:`vmservice.errors.no_room`: the errors of a full file system."""

from __future__ import annotations

import errno

from twisted.trial.unittest import SynchronousTestCase

from vmservice import errors


class NoRoomTests(SynchronousTestCase):
    def test_errnos(self) -> None:
        """An OSError of a full file system (ENOSPC) or of a quota (EDQUOT) is one of no room; others are not."""
        self.assertTrue(errors.no_room(OSError(errno.ENOSPC, "No space left on device")))
        self.assertTrue(errors.no_room(OSError(errno.EDQUOT, "Disk quota exceeded")))
        self.assertFalse(errors.no_room(OSError(errno.EIO, "Input/output error")))
        self.assertFalse(errors.no_room(FileNotFoundError(errno.ENOENT, "No such file or directory")))

    def test_words_of_a_child_process(self) -> None:
        """A child process's message (qemu-img's, QEMU's) naming the system's words for no room is one too."""
        self.assertTrue(errors.no_room(RuntimeError(
            "qemu-img failed (1): qemu-img: /s/nodes/demo-1/disk.qcow2: Could not create: No space left on device")))
        self.assertTrue(errors.no_room(RuntimeError("saving the VM state failed: Disk quota exceeded")))
        self.assertFalse(errors.no_room(RuntimeError("saving the VM state failed: Broken pipe")))

    def test_cause(self) -> None:
        """An error raised from one of no room is one too; one merely raised while handling it is not."""
        try:
            try:
                raise OSError(errno.ENOSPC, "full")
            except OSError as error:
                raise errors.Internal("the write failed") from error
        except errors.Internal as raised:
            self.assertTrue(errors.no_room(raised))
        try:
            try:
                raise OSError(errno.ENOSPC, "full")
            except OSError:
                raise ValueError("unrelated")
        except ValueError as raised:
            self.assertFalse(errors.no_room(raised))
