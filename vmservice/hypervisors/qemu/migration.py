# -*- test-case-name: tests.hypervisors.qemu.test_migration -*-
"""
A QEMU's state saved into a file and loaded from one, through QEMU's
migration: a suspend's full state (:func:`save_state`, :func:`load_state`),
a template's device state and its clones' (:func:`save_device_state`,
:func:`load_device_state`), and a save an earlier run began, cancelled
(:func:`cancel_migration`).  The files go to QEMU as descriptors handed over
QMP (``getfd``, ``fd:NAME``): QEMU 7.2 has no ``file:`` migration.
"""

from __future__ import annotations

import os
from typing import Protocol

from twisted.internet.defer import CancelledError, Deferred, TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater

from ...private_files import create_private
from ..base import HypervisorError, MachineExit, describe_exit
from ..qmp import JSON, JSONObject, QMPError
from .monitor import QemuMonitor, command, run_state


class Migrating(Protocol):
    """
    What the state's saves and loads need of a :class:`~.machine.QemuMachine`:
    its QMP commands and events, its end, its clock and its timings (the
    machine's, documented there).
    """

    POLL: float
    SAVE_BANDWIDTH: int
    LOAD_TIMEOUT: float
    FAILED_LOAD_EXIT: float
    STATE_FD: str
    SAVE_FD: str

    @property
    def reactor(self) -> IReactorTime:
        """Times the polls and the waits."""

    @property
    def monitor(self) -> QemuMonitor:
        """Its QMP monitor (the events' watchers)."""

    @property
    def exited(self) -> MachineExit | None:
        """How QEMU ended, or ``None`` while it runs."""

    @property
    def ended(self) -> Deferred[MachineExit]:
        """A new Deferred that fires with how QEMU ended."""

    async def qmp(self, command: str, **arguments: JSON) -> JSON:
        """Run one QMP command."""

    async def qmp_passing(self, fd: int, command: str, **arguments: JSON) -> JSON:
        """Run one QMP command with ``fd`` passed along."""


async def migrating(machine: Migrating) -> bool:
    """Whether a migration is under way (not yet completed, failed or cancelled)."""
    try:
        info = await machine.qmp("query-migrate")
    except QMPError as error:
        raise HypervisorError(f"query-migrate: {error}") from error
    return isinstance(info, dict) and info.get("status") not in (None, "none", "completed", "failed", "cancelled")


async def cancel_migration(machine: Migrating) -> None:
    """
    Cancel a migration still under way (a state save that an earlier run of
    the daemon began before it died: once it completed, QEMU would stop the
    VM again, for good), and return once it is over; nothing if there is none.
    """
    if await migrating(machine):
        await command(machine, "migrate_cancel")
        while await migrating(machine):
            await deferLater(machine.reactor, machine.POLL, lambda: None)


async def save_state(machine: Migrating, path: str) -> None:
    """
    Stop the VM and migrate its state into the new file ``path`` (see
    :func:`_migrate_to`); return once QEMU reports the migration completed.
    """
    await command(machine, "stop")
    # A clone loaded its state with x-ignore-shared on: its snapshot holds all of its memory.
    await _ignore_shared(machine, False)
    await command(machine, "migrate-set-parameters", **{"max-bandwidth": machine.SAVE_BANDWIDTH})
    await _migrate_to(machine, path)
    await _migration_done(machine, "saving the VM state")


async def save_device_state(machine: Migrating, path: str) -> None:
    """
    Write the device state of a running template to ``path`` without
    ``stop`` (``x-ignore-shared``: its memory is its RAM file).
    """
    await _ignore_shared(machine, True)
    await command(machine, "migrate-set-parameters", **{"max-bandwidth": machine.SAVE_BANDWIDTH})
    await _migrate_to(machine, path)
    await _migration_done(machine, "saving the device state")


async def _migrate_to(machine: Migrating, path: str) -> None:
    """
    Start a migration into the new file ``path``: the daemon creates it
    (0600 whatever QEMU's umask, never through a link, never over a file
    that exists) and hands QEMU its descriptor (``getfd``, ``fd:``);
    QEMU 7.2 has no ``file:`` migration, and ``exec:cat > path`` would
    have a shell create it with QEMU's umask, following links.

    :raise HypervisorError: the file cannot be made, or QEMU refused.
    """
    try:
        fd = create_private(path)
    except OSError as error:
        raise HypervisorError(f"cannot create the state file: {error}") from error
    await _pass_descriptor(machine, fd, machine.SAVE_FD)
    await command(machine, "migrate", uri=f"fd:{machine.SAVE_FD}")


async def _migration_done(machine: Migrating, what: str) -> None:
    """Poll ``query-migrate`` until the migration under way completed; raise if it failed."""
    while True:
        try:
            info = await machine.qmp("query-migrate")
        except QMPError as error:
            raise HypervisorError(f"{what}: {error}") from error
        if not isinstance(info, dict):
            raise HypervisorError(f"{what}: query-migrate answered {info!r}")
        status = info.get("status")
        if status == "completed":
            return
        if status in ("failed", "cancelled"):
            raise HypervisorError(f"{what} {status}: {info.get('error-desc', 'no reason given')}")
        await deferLater(machine.reactor, machine.POLL, lambda: None)


async def _ignore_shared(machine: Migrating, on: bool) -> None:
    """Whether migrations leave out memory mapped from a shared file (QMP only on QEMU 7.2)."""
    await command(
        machine, "migrate-set-capabilities", capabilities=[{"capability": "x-ignore-shared", "state": on}]
    )


async def load_device_state(machine: Migrating, path: str, resume: bool) -> None:
    """
    Load a template's device state into a clone waiting in ``-incoming
    defer``; return once it runs (``resume``: also when the state was saved
    stopped).
    """
    status = await _incoming(machine, path, ignore_shared=True)
    if status == "paused" and resume:
        await command(machine, "cont")
        status = "running"
    if status != "running":
        raise HypervisorError(f"loading the device state left the VM {status!r}")


async def load_state(machine: Migrating, path: str) -> None:
    """Load a full saved state into a VM waiting in ``-incoming defer``."""
    await _incoming(machine, path, ignore_shared=False)


async def _incoming(machine: Migrating, path: str, ignore_shared: bool) -> str:
    """
    Load the state file ``path`` into a VM waiting in ``-incoming defer``:
    QEMU reads it from a descriptor handed over QMP (no shell, no ``cat``
    forked off the big QEMU process), and tells the load's end by its
    events (no polling).

    :param ignore_shared: load with ``x-ignore-shared`` (a clone's device
        state; QEMU 7.2 knows no ``-global`` for it, so it is set here).
    :return: the run state the VM was left in, ``running`` or ``paused``.
    :raise HypervisorError: the state did not load (QEMU exits on a state
        it cannot load: the error says how it ended), or not in time.
    """
    capabilities: list[JSON] = [{"capability": "events", "state": True}]
    if ignore_shared:
        capabilities.append({"capability": "x-ignore-shared", "state": True})
    await command(machine, "migrate-set-capabilities", capabilities=capabilities)
    outcome: Deferred[str] = Deferred()

    def settle(status: str) -> None:
        if not outcome.called:
            outcome.callback(status)

    def watch(event: JSONObject) -> None:
        data = event.get("data")
        status = data.get("status") if isinstance(data, dict) else None
        if event.get("event") == "RESUME":
            settle("running")
        elif event.get("event") == "MIGRATION" and status in ("completed", "failed", "cancelled"):
            settle(str(status))

    machine.monitor.watchers.append(watch)
    exited = machine.ended
    exited.addCallback(lambda _: settle("exited")).addErrback(lambda _: None)
    try:
        await _hand_over(machine, path)
        await command(machine, "migrate-incoming", uri=f"fd:{machine.STATE_FD}")
        status = await outcome.addTimeout(machine.LOAD_TIMEOUT, machine.reactor)
    except DeferredTimeout:
        raise HypervisorError(f"loading the VM state: not done within {machine.LOAD_TIMEOUT:g} s") from None
    except HypervisorError as error:
        if machine.exited is not None:
            raise HypervisorError(f"loading the VM state: {describe_exit(machine.exited)}") from None
        raise HypervisorError(f"loading the VM state: {error}") from error
    finally:
        machine.monitor.watchers.remove(watch)
        exited.cancel()
    return await _loaded(machine, status)


async def _hand_over(machine: Migrating, path: str) -> None:
    """Hand QEMU an open descriptor of ``path`` as the machine's ``STATE_FD`` (``getfd``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise HypervisorError(f"cannot open the state file: {error}") from error
    await _pass_descriptor(machine, fd, machine.STATE_FD)


async def _pass_descriptor(machine: Migrating, fd: int, name: str) -> None:
    """Hand QEMU the descriptor ``fd`` as ``name`` (``getfd``) and close ours, whatever QEMU says."""
    try:
        await machine.qmp_passing(fd, "getfd", fdname=name)
    except QMPError as error:
        raise HypervisorError(f"getfd: {error}") from error
    finally:
        os.close(fd)


async def _loaded(machine: Migrating, status: str) -> str:
    """The run state after the load ended with ``status`` (an event's, or ``exited``)."""
    if status == "running":
        return status
    if status == "completed":
        # Loaded, but no RESUME: a state saved stopped, which QEMU leaves paused.
        status = await run_state(machine)
        if status not in ("paused", "running"):
            raise HypervisorError(f"loading the VM state left it {status!r}")
        return status
    if status != "exited":
        # QEMU 7.2 exits right after a failed load: report how, as for an exit seen first.
        ended = machine.ended
        ended.addTimeout(machine.FAILED_LOAD_EXIT, machine.reactor)
        try:
            await ended
        except (CancelledError, DeferredTimeout):
            raise HypervisorError(f"loading the VM state {status}") from None
    assert machine.exited is not None
    raise HypervisorError(f"loading the VM state: {describe_exit(machine.exited)}")


async def finish_incoming(machine: Migrating) -> None:
    """Poll ``query-status`` until QEMU leaves ``inmigrate``."""
    while True:
        try:
            status = await run_state(machine)
        except HypervisorError as error:
            if machine.exited is not None:
                raise HypervisorError(f"loading the VM state: {describe_exit(machine.exited)}") from None
            raise HypervisorError(f"loading the VM state: {error}") from error
        if status in ("paused", "running"):
            return
        if status != "inmigrate":
            raise HypervisorError(f"loading the VM state left it {status!r}")
        await deferLater(machine.reactor, machine.POLL, lambda: None)


__all__ = [
    "Migrating",
    "cancel_migration",
    "finish_incoming",
    "load_device_state",
    "load_state",
    "migrating",
    "save_device_state",
    "save_state",
]
