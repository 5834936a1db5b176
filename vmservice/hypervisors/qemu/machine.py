# -*- test-case-name: tests.hypervisors.qemu.test_machine,tests.hypervisors.qemu.test_migration,tests.hypervisors.qemu.test_monitor -*-
"""
A running QEMU as an :class:`~vmservice.hypervisors.base.IMachine`
(:class:`QemuMachine`): its end, its run-state requests (pause, resume,
reset, the power button, a stop graceful or not) and its lack of room; it
speaks QMP through its :class:`~.monitor.QemuMonitor` and saves and loads its
state through :mod:`.migration`.
"""

from __future__ import annotations

import os
from typing import Callable

from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from zope.interface import implementer

from ...observer import OneShotObserver
from ..base import IMachine, MachineExit
from ..qmp import JSON, JSONObject, QMPError
from .migration import (
    cancel_migration, finish_incoming, load_device_state, load_state, save_device_state, save_state,
)
from .monitor import QemuMonitor, command, run_state
from .process import WatchedProcess
from .reactors import IMachineReactor

log = Logger()


@implementer(IMachine)
class QemuMachine:
    """
    A running QEMU: our child, or one adopted after a restart.

    :param reactor: runs timeouts and polls, and connects to the monitor.
    :param process: what watches the process: has ``pid``, ``ended`` (a
        Deferred firing once with a :class:`MachineExit`) and ``kill()``.
    :param qmp_socket: the path of the VM's QMP socket.
    :param log_path: the file QEMU writes its output to, whose tail the
        :class:`MachineExit` carries; ``None`` for none.
    :ivar pid: the QEMU process id.
    :ivar ended: fires with a :class:`MachineExit` when the process is gone
        (a new Deferred each time it is read, so many may wait).
    :ivar reactor: what the machine runs on.
    :ivar monitor: its QMP monitor.
    """

    #: Seconds between ACPI power-button presses while a graceful stop waits.
    POWER_BUTTON_REPEAT = 2.0
    #: Seconds a QMP command may take before QEMU is deemed stuck.
    QMP_TIMEOUT = 30.0
    #: Seconds between polls of a migration (save or load) in progress.
    POLL = 0.02
    #: Migration bandwidth limit while saving state (QEMU's default throttles
    #: a stopped VM's save to a crawl).
    SAVE_BANDWIDTH = 64 << 30
    #: Seconds a state may take to load into a VM waiting in ``-incoming defer``.
    LOAD_TIMEOUT = 60.0
    #: Seconds QEMU may take to exit after it reported a failed load (QEMU 7.2 exits at once).
    FAILED_LOAD_EXIT = 5.0
    #: The name a state file's descriptor is handed to QEMU under (``getfd``, then ``fd:NAME``).
    STATE_FD = "state"
    #: The name the descriptor of a state file being saved is handed to QEMU under.
    SAVE_FD = "saving"

    def __init__(
        self, reactor: IMachineReactor, process: WatchedProcess, qmp_socket: str, log_path: str | None = None
    ) -> None:
        self.reactor = reactor
        self._log_path = log_path
        self._process = process
        self.monitor = QemuMonitor(
            reactor, qmp_socket, lambda: self._exit is None, timeout=self.QMP_TIMEOUT, poll=self.POLL
        )
        self._exit: MachineExit | None = None
        self._exited: OneShotObserver[MachineExit] = OneShotObserver()
        #: Called each time the VM stops for lack of room on the host (see :meth:`on_no_room`).
        self._no_room_watchers: list[Callable[[], None]] = []
        self.pid: int = process.pid
        process.ended.addCallback(self._ended)

    def _ended(self, result: MachineExit) -> MachineExit:
        """QEMU ended: its output's tail kept, the waiters told, the QMP session dropped."""
        if self._log_path is not None:
            result = _with_log_tail(result, self._log_path)
        self._exit = result
        self._exited.fire(result)
        self.monitor.close()
        return result

    @property
    def ended(self) -> Deferred[MachineExit]:
        """A new Deferred that fires with how QEMU ended (at once if it has)."""
        return self._exited.when_fired()

    @property
    def exited(self) -> MachineExit | None:
        """How QEMU ended, or ``None`` while it runs."""
        return self._exit

    @property
    def running(self) -> bool:
        """Whether QEMU is still running."""
        return self._exit is None

    async def qmp(self, command: str, **arguments: JSON) -> JSON:
        """
        Run one QMP command, connecting to the monitor on first use (QEMU
        creates its socket a moment after it starts: a missing socket is
        tried again for a few seconds).

        :raise QMPError: when QEMU refuses the command or is gone.
        """
        return await self.monitor.execute(None, command, arguments)

    async def qmp_passing(self, fd: int, command: str, **arguments: JSON) -> JSON:
        """
        Run one QMP command with the open file descriptor ``fd`` passed along
        (``SCM_RIGHTS``), for ``getfd``: the caller closes ``fd`` afterwards.

        :raise QMPError: when QEMU refuses the command or is gone.
        """
        return await self.monitor.execute(fd, command, arguments)

    def on_no_room(self, callback: Callable[[], None]) -> None:
        """
        Call ``callback`` each time QEMU stops the VM on a write to its disk
        that the host's file system had no room for: QEMU's default
        ``werror=enospc`` for the root drive, told by a ``BLOCK_IO_ERROR``
        event with ``nospace`` (events come on the QMP session, which is
        opened now and kept); and at once when ``query-status`` says
        ``io-error`` now (a VM adopted in that state).  See
        :meth:`IMachine.on_no_room`.
        """
        self._no_room_watchers.append(callback)
        if len(self._no_room_watchers) == 1:
            self.monitor.watchers.append(self._io_error)
            Deferred.fromCoroutine(self._stopped_now()).addErrback(lambda failure: None)

    def _io_error(self, event: JSONObject) -> None:
        """A QMP event: the watchers told when it says the VM stopped for lack of room."""
        data = event.get("data")
        if event.get("event") == "BLOCK_IO_ERROR" and isinstance(data, dict) and data.get("nospace") is True \
                and data.get("action") == "stop":
            self._no_room()

    async def _stopped_now(self) -> None:
        """Open the QMP session (for the events); tell the watchers if the VM is stopped on an I/O error now."""
        if await run_state(self) == "io-error":
            self._no_room()

    def _no_room(self) -> None:
        """Tell every watcher of lack of room (one that fails is logged, the others still told)."""
        for watcher in list(self._no_room_watchers):
            try:
                watcher()
            except Exception:
                log.failure("a watcher of a VM stopped for lack of room failed")

    def kill(self) -> Deferred[MachineExit]:
        """Kill QEMU with SIGKILL and fire when it is gone."""
        if self._exit is None:
            self._process.kill()
        return self.ended

    def pause(self) -> Deferred[None]:
        """QMP ``stop``; see :meth:`IMachine.pause`."""
        return Deferred.fromCoroutine(command(self, "stop"))

    def resume(self) -> Deferred[None]:
        """
        QMP ``cont``, after cancelling a migration still under way (a state
        save that an earlier run of the daemon began before it died: once it
        completed, QEMU would stop the VM again, for good); see
        :meth:`IMachine.resume`.
        """
        return Deferred.fromCoroutine(self._resume())

    async def _resume(self) -> None:
        """A save under way cancelled, then ``cont``."""
        await cancel_migration(self)
        await command(self, "cont")

    def reset(self) -> Deferred[None]:
        """QMP ``system_reset``; see :meth:`IMachine.reset`."""
        return Deferred.fromCoroutine(command(self, "system_reset"))

    def power_button(self) -> Deferred[None]:
        """QMP ``system_powerdown``; see :meth:`IMachine.power_button`."""
        return Deferred.fromCoroutine(command(self, "system_powerdown"))

    def run_state(self) -> Deferred[str]:
        """The ``status`` of QMP ``query-status``; see :meth:`IMachine.run_state`."""
        return Deferred.fromCoroutine(run_state(self))

    def save_state(self, path: str) -> Deferred[None]:
        """
        Stop the VM and migrate its state into the new file ``path`` (see
        :func:`.migration.save_state`); fires once QEMU reports the migration completed.
        """
        return Deferred.fromCoroutine(save_state(self, path))

    def save_device_state(self, path: str) -> Deferred[None]:
        """
        Write the device state of a running template to ``path`` without
        ``stop`` (``x-ignore-shared``: its memory is its RAM file); see
        :meth:`IMachine.save_device_state`.
        """
        return Deferred.fromCoroutine(save_device_state(self, path))

    def load_device_state(self, path: str, resume: bool = False) -> Deferred[None]:
        """
        Load a template's device state into a clone waiting in ``-incoming
        defer``, and fire once it runs; see :meth:`IMachine.load_device_state`.
        """
        return Deferred.fromCoroutine(load_device_state(self, path, resume))

    def snapshot_disk(self, overlay: str) -> Deferred[None]:
        """
        Switch the root drive to the existing qcow2 ``overlay`` (its header
        names the old disk's new place; QEMU does not rewrite it); see
        :meth:`IMachine.snapshot_disk`.
        """
        return Deferred.fromCoroutine(
            command(self, "blockdev-snapshot-sync", device="root", **{"snapshot-file": overlay},
                    format="qcow2", mode="existing")
        )

    def load_state(self, path: str) -> Deferred[None]:
        """Load a full saved state into a VM waiting in ``-incoming defer``; see :meth:`IMachine.load_state`."""
        return Deferred.fromCoroutine(load_state(self, path))

    def finish_incoming(self) -> Deferred[None]:
        """Poll ``query-status`` until QEMU leaves ``inmigrate``; see :meth:`IMachine.finish_incoming`."""
        return Deferred.fromCoroutine(finish_incoming(self))

    def stop(self, graceful: bool, grace: float) -> Deferred[MachineExit]:
        """
        Stop the VM: ACPI power-down through QMP when ``graceful``, then
        SIGKILL once ``grace`` seconds have passed without the process ending.
        """
        return Deferred.fromCoroutine(self._stop(graceful, grace))

    async def _stop(self, graceful: bool, grace: float) -> MachineExit:
        """See :meth:`stop`: the button pressed every :attr:`POWER_BUTTON_REPEAT` s until QEMU ends or is killed."""
        if self._exit is not None:
            return self._exit
        if graceful:
            try:
                await self.qmp("system_powerdown")
            except QMPError as error:
                log.info("graceful stop of pid {pid} failed: {error}", pid=self.pid, error=error)
            else:
                ended = self.ended
                timer = self.reactor.callLater(grace, self.kill)
                # A press the guest sends before its power-button watcher
                # opened the input device is lost: press again now and then.
                again = LoopingCall(self._press_power_button)
                again.clock = self.reactor
                again.start(self.POWER_BUTTON_REPEAT, now=False)
                result = await ended
                again.stop()
                if timer.active():
                    timer.cancel()
                return result
        return await self.kill()

    def _press_power_button(self) -> None:
        """Press the power button again (QEMU gone meanwhile is no error)."""
        Deferred.fromCoroutine(self.qmp("system_powerdown")).addErrback(lambda failure: None)


def _with_log_tail(ended: MachineExit, log_path: str) -> MachineExit:
    """``ended`` with the last 4 KiB of QEMU's output file as its output (as it is if the file cannot be read)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ended
    return MachineExit(ended.exit_code, ended.signal, tail)


__all__ = ["QemuMachine"]
