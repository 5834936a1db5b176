# -*- test-case-name: tests.nodes.test_lifecycle -*-
"""
Suspend to disk and restore: a node's memory and device state saved to its
snapshot file (its VM then ends and its memory is released), and a VM started
from that file, which continues where the guest was.

The snapshot is written as ``state.bin.partial`` and committed (flushed,
renamed) only when complete, so a crash never leaves a snapshot that looks
whole but is not (:mod:`.recovery` relies on it).  It holds the guest's
memory (its ``/run/secrets`` too): the file is made 0600 before QEMU writes
in it (:meth:`IMachine.save_state`), in the node's 0700 directory.
"""

from __future__ import annotations

from twisted.logger import Logger

from ..durable import commit
from ..errors import AgentNotConnected, Conflict
from ..hypervisors.base import IMachine
from .launch import Restore
from .model import Status, Wait
from .operation import Done, NodeOperations, drive, running, set_anyway, settled, suspendable, wait_after
from .readiness import NotReady, sync_clock, wait_for_agent
from .room import room_for
from .runtime import NodeRuntime
from .transitions import Op, Outcome

log = Logger()


class Snapshots(NodeOperations):
    """Suspend to disk and restore."""

    async def suspend(self, hostname: str, automatic: bool = False) -> Done:
        """
        Save a running (or paused) node's memory and device state to its
        snapshot file, then end its VM, which releases its memory.

        :param automatic: the idle timer asks (:mod:`.idle`): only a
            ``Running`` node without PCI devices is suspended (otherwise
            nothing is done), and its
            record says the snapshot is the timer's, so that the next request
            that needs its guest restores it.  An asked suspend of a node the
            timer suspended makes the suspension the user's: no request
            undoes it any more.
        """
        node = await settled(self._registry, hostname)
        if automatic and (node.record.status is not Status.RUNNING or node.record.pci_devices):
            return Done(Op.SUSPEND, hostname, changed=False)  # the timer leaves these alone, quietly
        await suspendable(self._parts.driver)
        if node.record.pci_devices:
            raise Conflict(f"node {hostname!r} has host PCI devices passed through, whose state cannot be saved",
                           code="pci_devices_not_suspendable")
        with running(node, Op.SUSPEND) as outcome:
            if automatic and node.record.status is not Status.RUNNING:
                return Done(Op.SUSPEND, hostname, changed=False)
            if outcome is Outcome.DONE:
                if node.record.idle_suspended:
                    node.set(Status.SUSPENDED, idle_suspended=False)
                return Done(Op.SUSPEND, hostname, changed=False)
            machine = node.machine
            assert machine is not None
            with room_for(f"the snapshot of node {hostname!r}"):
                await self._save(node, machine, automatic)
            node.take_machine()
            await node.release(machine=machine)
            set_anyway(node, Status.SUSPENDED, pid=None)
        log.info("suspended node {hostname}{how}", hostname=hostname, how=" (idle)" if automatic else "")
        return Done(Op.SUSPEND, hostname)

    async def _save(self, node: NodeRuntime, machine: IMachine, automatic: bool) -> None:
        """Write and commit the snapshot; on failure the VM carries on as it was."""
        paths = node.paths
        before = node.record.status
        saving = False
        try:
            # In the record first (a crash from here on is finished or undone at the next start); a record
            # that cannot be written fails the suspend before the VM is touched.
            node.set(Status.SUSPENDING, idle_suspended=automatic)
            paths.discard_partial_snapshot()  # the save makes the file anew (0600), never over one
            saving = True
            await drive("suspend", node.hostname, machine.save_state(paths.partial_state), machine)
            commit(paths.partial_state, paths.state)
        except BaseException:
            paths.discard_partial_snapshot()
            if node.machine is machine:
                if saving and before == Status.RUNNING:
                    try:
                        await machine.resume()
                    except Exception:
                        log.failure("resuming node {hostname} after a failed suspend", hostname=node.hostname)
                if node.machine is machine:  # else its end, heard meanwhile, said what the node is now
                    set_anyway(node, before)
            raise

    async def restore(self, hostname: str, wait: Wait, timeout: float) -> Done:
        """
        Start a suspended node's VM from its snapshot: the guest continues
        where it was (its clock is then set).  The snapshot is deleted once
        the VM runs, since the disk moves on from that point.

        :raise InsufficientMemory: its VM does not fit in the memory budget
            (:mod:`.admission`); the node stays suspended, its snapshot kept.
        """
        node = await settled(self._registry, hostname)
        await suspendable(self._parts.driver)
        with running(node, Op.RESTORE), room_for(f"the restore of node {hostname!r}"):
            await self._restore(node)
        await wait_after(self._parts.clock, node, wait, timeout)
        return Done(Op.RESTORE, hostname)

    async def wake(self, hostname: str, timeout: float) -> bool:
        """
        Restore a node the idle timer suspended, and wait for its agent:
        what a request that needs its guest does first (:mod:`.idle`).  A
        node that is not (or no longer) the timer's to wake is left as it is.

        :return: whether it was woken.
        :raise AgentNotConnected: its agent did not answer within ``timeout``
            seconds (the 503 of a node whose agent is not connected).
        :raise ServiceError: what a restore raises (``restore_failed``, ...).
        """
        node = await settled(self._registry, hostname)
        node.phase.begin(Op.RESTORE.value)
        clock = self._parts.clock
        began = clock.seconds()
        try:
            if node.record.status is not Status.SUSPENDED or not node.record.idle_suspended:
                return False
            with room_for(f"the restore of node {hostname!r}"):
                await self._restore(node)
        finally:
            node.phase.finish()
        restored = clock.seconds()
        if node.machine is not None and node.agent is not None:
            try:
                await wait_for_agent(clock, node.machine, node.agent, timeout)
            except NotReady as error:
                raise AgentNotConnected(f"the agent of node {hostname!r} did not answer after its wake: {error}",
                                        code="agent_unavailable") from None
        log.info("woke node {hostname}: VM running after {restore:.3f} s, agent answered {agent:.3f} s later",
                 hostname=hostname, restore=restored - began, agent=clock.seconds() - restored)
        return True

    async def _restore(self, node: NodeRuntime) -> None:
        """The restore itself (the node is suspended and this operation's): its VM from the snapshot, running."""
        hostname = node.hostname
        if not node.paths.has_snapshot():
            raise Conflict(f"node {hostname!r} has no snapshot to restore", code="no_snapshot")
        kernel, initrd = node.record.kernel, node.record.initrd
        if not kernel:
            image = self._parts.catalog.image(self._parts.catalog.group(node.record.hostgroup), node.record.image)
            kernel, initrd = image.kernel.path, image.initrd.path
        claim = self._parts.admission.admit(node.record.ram_bytes, hostname=hostname)
        began = self._parts.clock.seconds()
        try:
            node.set(Status.RESTORING)
            net = await self._parts.addressing.attach(node.record)
            machine = await node.spawn(Restore(kernel, initrd, node.paths.state), net)
            await drive("restore", hostname, machine.finish_incoming())
            # Written before the guest runs on (and the snapshot goes): a record that cannot say
            # Running fails the restore while the snapshot still matches the disk.
            node.set(Status.RUNNING)
            await drive("restore", hostname, machine.resume())
        except BaseException:
            await node.release()
            set_anyway(node, Status.SUSPENDED, pid=None)
            raise
        finally:
            claim.release()  # the node's VM runs (and counts) or it failed
        self._parts.metrics.observe_restore(node.record.hostgroup, self._parts.clock.seconds() - began)
        node.paths.discard_snapshot()
        agent = node.connect_agent()
        sync_clock(hostname, agent, self._parts.wall_clock)
        log.info("restored node {hostname}", hostname=hostname)


__all__ = ["Snapshots"]
