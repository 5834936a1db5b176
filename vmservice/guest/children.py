# -*- test-case-name: tests.guest.test_children -*-
"""
The agent's children, supervised the one way: each is watched on the agent's
loop through a pidfd (no SIGCHLD handler, no polling), reaped with
``waitpid``, signalled as a whole (its process group, or what the caller says
its processes are), and killed some time after it was asked to end.

Exec (:mod:`vmservice.guest.execution`), the shell (:mod:`vmservice.guest.shell`)
and background execs (:mod:`vmservice.guest.background`) hold one
:class:`Child` each.  A child that is being killed is not reaped as soon as it
exits: its zombie keeps its process group (or session) id from being reused
until the last SIGKILL went to the id.

Standard library only.
"""

from __future__ import annotations

import os
import signal
from typing import Callable, Optional

from vmservice.guest.loop import Loop, Timer


def signal_group(pgid: int, number: int) -> None:
    """Send signal ``number`` to process group ``pgid``; a group that is gone (or not ours) is left alone."""
    try:
        os.killpg(pgid, number)
    except (ProcessLookupError, PermissionError):
        pass


class Child:
    """
    One child process, watched from the moment it is known.

    :ivar pid: the child, the leader of its own process group (and session).
    :param loop: where its pidfd is watched, and its kill timed.
    :param on_exit: called on the loop once the child has exited (it is not
        reaped yet: :meth:`reap` does that, or :meth:`kill`).
    :param send: how a signal reaches the child's processes, given the pid
        and the signal (default: :func:`signal_group`, its process group).
    """

    def __init__(
        self,
        loop: Loop,
        pid: int,
        on_exit: Callable[[], None],
        send: Callable[[int, int], None] = signal_group,
    ) -> None:
        self.pid = pid
        self._loop = loop
        self._send = send
        self._pidfd = os.pidfd_open(pid)
        self._kill_timer: Optional[Timer] = None
        loop.watch(self._pidfd, on_exit)

    def forget(self) -> None:
        """Stop watching the child (its pidfd closed); it is not reaped."""
        if self._pidfd >= 0:
            self._loop.watch(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1

    def reap(self) -> int:
        """
        Stop watching the child and collect its wait status, waiting for it
        if it has not exited; 0 when it was reaped already.
        """
        self.forget()
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            status = 0
        return status

    def signal(self, number: int) -> None:
        """Send signal ``number`` to the child's processes."""
        self._send(self.pid, number)

    def kill_later(self, grace: float, before_reap: Callable[[], None] = lambda: None) -> None:
        """
        In ``grace`` seconds, :meth:`kill` the child (once, however often asked).

        :param before_reap: run between the SIGKILL and the reaping.
        """
        if self._kill_timer is None:
            self._kill_timer = self._loop.call_later(grace, lambda: self.kill(before_reap))

    def kill(self, before_reap: Callable[[], None] = lambda: None) -> None:
        """
        Send SIGKILL to the child's processes, run ``before_reap``, and reap
        the child (waiting for it to die).
        """
        self._kill_timer = None
        self.signal(signal.SIGKILL)
        before_reap()
        self.reap()

    def cancel_kill(self) -> None:
        """Do not kill the child after all (a :meth:`kill_later` still to come is dropped)."""
        if self._kill_timer is not None:
            self._kill_timer.cancel()
            self._kill_timer = None


__all__ = ["Child", "signal_group"]
