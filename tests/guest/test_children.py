# -*- test-case-name: tests.guest.test_children -*-
"""
Tests for :mod:`vmservice.guest.children`, without a child: the pidfd is a
pipe's read end (readable once the test writes to it, as a pidfd is once its
process exited), ``waitpid`` and ``killpg`` are recorded, the loop's clock is
the test's.  Real children are supervised in the integration tests of exec,
the shell and background execs.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest import children
from vmservice.guest.children import Child, signal_group
from vmservice.guest.loop import Loop


class ChildTests(SynchronousTestCase):
    """:class:`Child`: watched, reaped, signalled and killed."""

    def setUp(self) -> None:
        self.now = 0.0
        self.loop = Loop(lambda: self.now)
        self.addCleanup(self.loop.close)
        self.calls: list[tuple[object, ...]] = []
        self.pipe = os.pipe()
        for fd in self.pipe:
            self.addCleanup(os.close, fd)
        self.pidfds: list[int] = []
        self.patch(children.os, "pidfd_open", self._pidfd_open)
        self.status = 0x0100
        self.patch(children.os, "waitpid", self._waitpid)
        self.patch(children.os, "killpg", lambda pgid, number: self.calls.append(("killpg", pgid, number)))

    def _pidfd_open(self, pid: int) -> int:
        self.calls.append(("pidfd_open", pid))
        self.pidfds.append(os.dup(self.pipe[0]))
        return self.pidfds[-1]

    def child(self, pid: int, *args: Any, **kwargs: Any) -> Child:
        """A :class:`Child` forgotten (its pidfd closed) at the end of the test."""
        child = Child(self.loop, pid, *args, **kwargs)
        self.addCleanup(child.forget)
        return child

    def _waitpid(self, pid: int, options: int) -> tuple[int, int]:
        self.calls.append(("waitpid", pid, options))
        if self.status < 0:
            raise ChildProcessError()
        return pid, self.status

    def exit(self) -> None:
        """The child exits: its pidfd becomes readable; the loop runs once."""
        os.write(self.pipe[1], b"x")
        self.loop.run_once(0)

    def test_exit_watched(self) -> None:
        """The child's pidfd is watched from the start: its exit calls ``on_exit``, which may reap it."""
        exited: list[int] = []
        child: Child = self.child(42, lambda: exited.append(child.reap()))
        self.assertEqual(child.pid, 42)
        self.assertEqual(self.calls, [("pidfd_open", 42)])
        self.loop.run_once(0)
        self.assertEqual(exited, [])
        self.exit()
        self.assertEqual(exited, [0x0100])
        self.assertEqual(self.calls[-1], ("waitpid", 42, 0))

    def test_reap_closes_pidfd(self) -> None:
        """Reaping stops the watch and closes the pidfd, once; a child reaped already has status 0."""
        self.status = -1
        child = self.child(42, self.fail)
        self.assertEqual(child.reap(), 0)
        self.assertRaises(OSError, os.fstat, self.pidfds[0])
        child.forget()
        self.loop.run_once(0)

    def test_forget_leaves_zombie(self) -> None:
        """Forgetting a child stops the watch without reaping it."""
        child = self.child(42, self.fail)
        child.forget()
        self.assertRaises(OSError, os.fstat, self.pidfds[0])
        self.loop.run_once(0)
        self.assertEqual(self.calls, [("pidfd_open", 42)])

    def test_signal(self) -> None:
        """Signals go to the child's process group by default, else through ``send``."""
        self.child(42, self.fail).signal(signal.SIGTERM)
        sent: list[tuple[int, int]] = []
        self.child(43, self.fail, send=lambda pid, number: sent.append((pid, number))).signal(signal.SIGHUP)
        self.assertEqual(self.calls[1:], [("killpg", 42, signal.SIGTERM), ("pidfd_open", 43)])
        self.assertEqual(sent, [(43, signal.SIGHUP)])

    def test_kill_later(self) -> None:
        """
        ``kill_later`` kills once after the grace (however often asked): SIGKILL,
        then what the caller runs before the reaping, then the reaping.
        """
        child = self.child(42, self.fail)
        before: list[str] = []
        child.kill_later(0.5, lambda: before.append("closed"))
        child.kill_later(0.5, lambda: before.append("twice"))
        self.now = 0.4
        self.loop.run_once(0)
        self.assertEqual(self.calls, [("pidfd_open", 42)])
        self.now = 0.5
        self.loop.run_once(0)
        self.assertEqual(before, ["closed"])
        self.assertEqual(self.calls[1:], [("killpg", 42, signal.SIGKILL), ("waitpid", 42, 0)])

    def test_cancel_kill(self) -> None:
        """A kill still to come can be called off."""
        child = self.child(42, self.fail)
        child.kill_later(0.5)
        child.cancel_kill()
        self.now = 1.0
        self.loop.run_once(0)
        self.assertEqual(self.calls, [("pidfd_open", 42)])


class SignalGroupTests(SynchronousTestCase):
    """:func:`signal_group`."""

    def test_gone_or_not_ours(self) -> None:
        """A process group that is gone, or that we may not signal, is left alone."""
        for error in (ProcessLookupError, PermissionError):
            def killpg(pgid: int, number: int, error: type[Exception] = error) -> None:
                raise error()

            self.patch(children.os, "killpg", killpg)
            signal_group(42, signal.SIGTERM)
