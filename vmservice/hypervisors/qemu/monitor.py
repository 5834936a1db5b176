# -*- test-case-name: tests.hypervisors.qemu.test_monitor -*-
"""
A QEMU's QMP monitor as its machine speaks to it: one session for every
caller, made on first use (:class:`QemuMonitor`), the events QEMU sends
handed to their watchers; and the requests every part of the machine makes
through it (:func:`command`, :func:`run_state`).
"""

from __future__ import annotations

from typing import Callable, Protocol

from twisted.internet.defer import CancelledError, Deferred, TimeoutError as DeferredTimeout
from twisted.internet.endpoints import UNIXClientEndpoint, connectProtocol
from twisted.internet.error import ConnectError
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from ...observer import OneShotObserver
from ..base import HypervisorError
from ..qmp import JSON, JSONObject, QMPError, QMPProtocol
from .reactors import IMachineReactor


class QemuMonitor:
    """
    The QMP monitor of one QEMU.  QEMU serves one QMP client at a time (a
    second one is accepted by the kernel but never greeted), so every
    caller shares one session; QEMU creates its socket a moment after it
    starts, so a missing socket is tried again for a few seconds.

    :param reactor: connects to the socket and times the commands.
    :param socket: the path of the VM's QMP socket.
    :param running: whether QEMU still runs (a command to a QEMU gone fails
        at once, and a refused connection is not tried again).
    :param timeout: seconds a command, or QEMU's greeting, may take before
        QEMU is deemed stuck.
    :param poll: seconds between attempts to reach a socket not there yet.
    :ivar socket: the path of the VM's QMP socket.
    :ivar session: the session open now, or ``None``.
    :ivar watchers: called with each QMP event QEMU sends, on whichever session.
    """

    def __init__(
        self, reactor: IMachineReactor, socket: str, running: Callable[[], bool], *, timeout: float, poll: float
    ) -> None:
        self._reactor = reactor
        self.socket = socket
        self._running = running
        self._timeout = timeout
        self._poll = poll
        self.session: QMPProtocol | None = None
        #: The connection being made, which callers meanwhile wait for.
        self._connecting: OneShotObserver[QMPProtocol] | None = None
        self.watchers: list[Callable[[JSONObject], None]] = []

    async def execute(self, fd: int | None, command: str, arguments: dict[str, JSON]) -> JSON:
        """
        Run one QMP command, with the open file descriptor ``fd`` passed
        along when it is not ``None`` (the caller closes it afterwards).

        :raise QMPError: when QEMU refuses the command, is gone, or does not
            answer in time (the session is then dropped, so that a late
            answer is never taken for the next command's).
        """
        if not self._running():
            raise QMPError("the VM is not running")
        if self.session is None or self.session.transport is None or self.session.lost:
            self.session = await self._shared_session()
        protocol = self.session
        if fd is not None:
            # Sent with the next bytes written, which are this command's (or a command before it,
            # which QEMU reads first): QEMU holds the descriptor until getfd takes it.
            protocol.send_fd(fd)
        answer = protocol.execute(command, **arguments)
        answer.addTimeout(self._timeout, self._reactor)
        try:
            return await answer
        except (CancelledError, DeferredTimeout):
            if protocol.transport is not None:
                protocol.transport.loseConnection()
            raise QMPError(f"{command}: no answer from QEMU within {self._timeout:g} s") from None

    async def _shared_session(self) -> QMPProtocol:
        """One connection for every caller: those that arrive while it is being made wait for it."""
        connecting = self._connecting
        if connecting is None:
            connecting = self._connecting = OneShotObserver()

            def settle(result: QMPProtocol | Failure, connected: OneShotObserver[QMPProtocol]) -> None:
                # The next caller after this one makes a new connection.
                self._connecting = None
                if isinstance(result, Failure):
                    connected.error(result)
                else:
                    connected.fire(result)

            Deferred.fromCoroutine(self._connect()).addBoth(settle, connecting)
        return await connecting.when_fired()

    async def _connect(self, attempts: int = 250) -> QMPProtocol:
        """A new session, greeted, after up to ``attempts`` tries while the socket is missing or refused."""
        for attempt in range(attempts):
            endpoint = UNIXClientEndpoint(self._reactor, self.socket, timeout=5)
            protocol = QMPProtocol(self.event)
            try:
                await connectProtocol(endpoint, protocol)
            except ConnectError as error:
                # Missing, or still the socket file of an earlier QEMU (refused).
                if self._running() and attempt + 1 < attempts:
                    await deferLater(self._reactor, self._poll, lambda: None)
                    continue
                raise QMPError(f"cannot reach QMP: {error}") from error
            ready = protocol.ready
            ready.addTimeout(self._timeout, self._reactor)
            try:
                await ready
            except (CancelledError, DeferredTimeout):
                if protocol.transport is not None:
                    protocol.transport.loseConnection()
                raise QMPError(f"QEMU did not greet on QMP within {self._timeout:g} s") from None
            return protocol
        raise QMPError("cannot reach QMP")

    def event(self, event: JSONObject) -> None:
        """Hand one QMP event to every watcher."""
        for watcher in list(self.watchers):
            watcher(event)

    def close(self) -> None:
        """Drop the session open now, if any (QEMU ended)."""
        if self.session is not None and self.session.transport is not None:
            self.session.transport.loseConnection()


class QmpCaller(Protocol):
    """What runs QMP commands: a :class:`~.machine.QemuMachine`."""

    async def qmp(self, command: str, **arguments: JSON) -> JSON:
        """Run one QMP command; see :meth:`.machine.QemuMachine.qmp`."""


async def command(machine: QmpCaller, name: str, **arguments: JSON) -> None:
    """
    Run the QMP command ``name`` for its effect.

    :raise HypervisorError: QEMU refused it or is gone.
    """
    try:
        await machine.qmp(name, **arguments)
    except QMPError as error:
        raise HypervisorError(f"{name}: {error}") from error


async def run_state(machine: QmpCaller) -> str:
    """
    The ``status`` of QMP ``query-status``.

    :raise HypervisorError: QEMU refused, is gone, or answered without one.
    """
    try:
        return str(member(await machine.qmp("query-status"), "status"))
    except (QMPError, KeyError, TypeError) as error:
        raise HypervisorError(f"query-status: {error}") from error


def member(answer: JSON, key: str) -> JSON:
    """``answer[key]`` of a QMP answer: KeyError when absent, TypeError when it is no object."""
    if not isinstance(answer, dict):
        raise TypeError(f"{answer!r} is not a JSON object")
    return answer[key]


__all__ = ["QemuMonitor", "QmpCaller", "command", "member", "run_state"]
