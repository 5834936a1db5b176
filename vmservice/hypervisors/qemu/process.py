# -*- test-case-name: tests.hypervisors.qemu.test_driver,tests.hypervisors.qemu.test_processes -*-
"""
A QEMU process as the daemon watches it: its own child
(:class:`QemuProcess`, a ``ProcessProtocol`` that keeps the tail of its
output and tells when it ended), or one an earlier run of the daemon started
(:class:`PidWatch`, through a pidfd); :class:`WatchedProcess` is what both
offer a :class:`~.machine.QemuMachine`.
"""

from __future__ import annotations

import os
import signal
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IReactorFDSet, IReadDescriptor
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from ...observer import OneShotObserver
from ..base import MachineExit


class WatchedProcess(Protocol):
    """
    What a :class:`QemuMachine` watches its QEMU process through: a child
    (:class:`QemuProcess`) or an adopted process (:class:`PidWatch`).
    """

    @property
    def pid(self) -> int:
        """The process id."""

    @property
    def ended(self) -> Deferred[MachineExit]:
        """A new Deferred that fires with how the process ended."""

    def kill(self) -> None:
        """Send SIGKILL (a process already gone is fine)."""


class QemuProcess(ProcessProtocol):
    """
    Watches one QEMU child: keeps the tail of its output and tells when it
    ended.

    :ivar output: the last bytes the child wrote on its output pipes.
    :ivar watch: a marker to look for in the output and the Deferred fired
        once it appears, or ``None``.
    """

    _TAIL = 8192

    def __init__(self) -> None:
        self._ended: OneShotObserver[MachineExit] = OneShotObserver()
        self.output = b""
        self.watch: tuple[bytes, Deferred[None]] | None = None
        self._pid: int | None = None

    def connectionMade(self) -> None:
        """The child started: its pid kept."""
        # Kept now: a child that ends at once (killed as it starts) is reaped
        # within spawnProcess, and its transport's pid is None from then on.
        self._pid = self.transport.pid if self.transport is not None else None

    @property
    def ended(self) -> Deferred[MachineExit]:
        """A new Deferred that fires with how the child ended (at once if it has)."""
        return self._ended.when_fired()

    @property
    def finished(self) -> bool:
        """Whether the child has ended."""
        return self._ended.fired

    def _keep(self, data: bytes) -> None:
        """Keep the tail of the output; fire the watch once its marker shows."""
        self.output = (self.output + data)[-self._TAIL :]
        if self.watch is not None and self.watch[0] in self.output:
            marker, seen = self.watch
            self.watch = None
            seen.callback(None)

    def outReceived(self, data: bytes) -> None:
        """Output on stdout, kept."""
        self._keep(data)

    def errReceived(self, data: bytes) -> None:
        """Output on stderr, kept."""
        self._keep(data)

    @property
    def pid(self) -> int:
        """The child's process id (also once it has ended)."""
        if self._pid is None:
            raise AttributeError("the process has not started")
        return int(self._pid)

    def kill(self) -> None:
        """SIGKILL the child; one already gone is fine (processEnded follows)."""
        try:
            if self.transport is None:
                raise AttributeError("the process has not started")
            self.transport.signalProcess("KILL")
        except Exception:  # already gone: processEnded will follow
            pass

    def processEnded(self, reason: Failure) -> None:
        """The child ended: how, told to every waiter."""
        value = reason.value
        exit_code: int | None = None
        sig: int | None = None
        if isinstance(value, ProcessDone):
            exit_code = 0
        elif isinstance(value, ProcessTerminated):
            exit_code = value.exitCode
            sig = value.signal
        self._ended.fire(MachineExit(exit_code, sig, self.output.decode("utf-8", "replace")))


@implementer(IReadDescriptor)
class PidWatch:
    """
    Watches a QEMU that is not our child (adopted after a daemon restart)
    through a pidfd, which becomes readable when the process ends.  Its exit
    status cannot be known: ``ended`` fires with a :class:`MachineExit` that
    has neither.

    :param reactor: watches the pidfd.
    :param pid: the process id.
    :param pidfd: a pidfd of ``pid``, closed once the process ended.
    """

    def __init__(self, reactor: IReactorFDSet, pid: int, pidfd: int) -> None:
        self._reactor = reactor
        self.pid = pid
        self._fd: int | None = pidfd
        self._ended: OneShotObserver[MachineExit] = OneShotObserver()
        reactor.addReader(self)

    @property
    def ended(self) -> Deferred[MachineExit]:
        """A new Deferred that fires once the process is gone (at once if it is)."""
        return self._ended.when_fired()

    def fileno(self) -> int:
        """The pidfd (-1 once closed)."""
        return -1 if self._fd is None else self._fd

    def logPrefix(self) -> str:
        """What the reactor's log calls this reader."""
        return f"pidfd {self.pid}"

    def doRead(self) -> None:
        """The pidfd is readable: the process ended."""
        self._close()
        self._ended.fire(MachineExit(None, None, ""))

    def connectionLost(self, reason: Failure) -> None:
        """The reactor gave up the pidfd: taken as the end of the process."""
        self.doRead()

    def kill(self) -> None:
        """SIGKILL the process through its pidfd (never a recycled pid)."""
        if self._fd is not None:
            try:
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)
            except OSError:
                pass

    def _close(self) -> None:
        """Stop watching and close the pidfd (once)."""
        if self._fd is not None:
            self._reactor.removeReader(self)
            os.close(self._fd)
            self._fd = None


def child_env() -> dict[str, str]:
    """The environment QEMU runs in: ``PATH`` only (the daemon's, or a default), and the C locale."""
    return {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LC_ALL": "C"}


__all__ = ["PidWatch", "QemuProcess", "WatchedProcess", "child_env"]
