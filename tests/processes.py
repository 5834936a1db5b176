# -*- test-case-name: tests.hypervisors.qemu.test_driver,tests.hypervisors.qemu.test_probe,tests.network.test_host,tests.storage.test_overlay -*-
"""
A reactor that records the children it is asked to start instead of
starting them (the shape of ``DummyProcessReactor`` in twisted.runner's
tests), for unit tests of code that runs programs through
``IReactorProcess.spawnProcess`` or :func:`twisted.internet.utils.getProcessOutputAndValue`.

The test plays the child: it reads what was spawned, writes to the
protocol and ends the process with :meth:`RecordedTransport.end`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IProcessProtocol, IReactorFDSet, IReactorProcess, IReactorTime, IReactorUNIX
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from zope.interface import implementer

from vmservice.hypervisors.qemu import IProbeReactor, IQemuReactor


class RecordedTransport:
    """
    The transport of a child that was never started: records signals and
    standard input.

    :ivar protocol: the child's process protocol.
    :ivar pid: a made-up process id.
    :ivar signals: the signals sent to the child, by name.
    :ivar stdin: the bytes written to the child's standard input.
    :ivar stdin_closed: whether its standard input was closed.
    """

    def __init__(self, protocol: Any, pid: int) -> None:
        self.protocol = protocol
        self.pid = pid
        self.signals: list[str] = []
        self.stdin = b""
        self.stdin_closed = False

    def signalProcess(self, name: str) -> None:
        """Record the signal; the child goes on until :meth:`end`."""
        self.signals.append(name)

    def writeToChild(self, fd: int, data: bytes) -> None:
        """Record what goes to the child's standard input."""
        assert fd == 0, fd
        self.stdin += data

    def write(self, data: bytes) -> None:
        """Record what goes to the child's standard input."""
        self.writeToChild(0, data)

    def closeStdin(self) -> None:
        """Record that the child's standard input was closed."""
        self.stdin_closed = True

    def end(self, code: int | None = 0, out: bytes = b"", err: bytes = b"", signal: int | None = None) -> None:
        """
        Play the end of the child: its output and error output, then its
        exit status ``code`` (or death by ``signal``).
        """
        if out:
            self.protocol.childDataReceived(1, out)
        if err:
            self.protocol.childDataReceived(2, err)
        if code == 0 and signal is None:
            reason = Failure(ProcessDone(0))
        else:
            reason = Failure(ProcessTerminated(code, signal, None))
        self.protocol.processEnded(reason)


@implementer(IReactorProcess, IReactorTime, IReactorUNIX, IReactorFDSet, IQemuReactor, IProbeReactor)
class ProcessReactor(MemoryReactorClock):
    """
    A memory reactor (time, sockets, file descriptors) that records
    ``spawnProcess`` calls.

    :ivar spawned: ``(protocol, argv, childFDs)`` of each child, in order.
    :ivar environments: the environment each child was given.
    :ivar transports: the transport of each child, in order.
    """

    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[tuple[Any, list[bytes | str], dict[int, int | str]]] = []
        self.environments: list[Mapping[str, str] | None] = []
        self.transports: list[RecordedTransport] = []

    def spawnProcess(
        self,
        processProtocol: IProcessProtocol,
        executable: bytes | str,
        args: Sequence[bytes | str],
        env: Mapping[str, str] | None = None,
        path: None | bytes | str = None,
        uid: int | None = None,
        gid: int | None = None,
        usePTY: bool = False,
        childFDs: Mapping[int, int | str] | None = None,
    ) -> RecordedTransport:
        """Record the child and connect its protocol to a :class:`RecordedTransport`."""
        self.spawned.append((processProtocol, list(args), dict(childFDs or {})))
        self.environments.append(env)
        transport = RecordedTransport(processProtocol, 4242 + len(self.transports))
        self.transports.append(transport)
        processProtocol.makeConnection(transport)
        return transport


__all__ = ["ProcessReactor", "RecordedTransport"]
