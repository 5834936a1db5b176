# -*- test-case-name: tests.nodes.test_lifecycle -*-
"""
Lifecycle operations on a node's VM: pause, resume, reboot, shutdown and
relaunch (suspend and restore are in :mod:`.snapshots`).

Each answers with a :class:`~.operation.Done` (or, for relaunch, the node)
and leaves the words to the API; which operation goes ahead in which status
is :mod:`.transitions`' table.
"""

from __future__ import annotations

import os

from twisted.logger import Logger

from ..errors import Conflict, Internal
from .events import EventType
from .launch import Cold
from .model import NodeRecord, Status, Wait, visible
from .operation import Done, NodeOperations, drive, running, set_anyway, settled, wait_after
from .readiness import sync_clock
from .room import room_for
from .transitions import Op, Outcome

log = Logger()


class Lifecycle(NodeOperations):
    """Pause, resume, reboot, shutdown and relaunch."""

    async def pause(self, hostname: str) -> Done:
        """Freeze a running node's VM; a paused node stays paused."""
        node = await settled(self._registry, hostname)
        with running(node, Op.PAUSE) as outcome:
            if outcome is Outcome.DONE:
                return Done(Op.PAUSE, hostname, changed=False)
            machine = node.machine
            assert machine is not None
            await drive("pause", hostname, machine.pause(), machine)
            node.set(Status.PAUSED)
        log.info("paused node {hostname}", hostname=hostname)
        return Done(Op.PAUSE, hostname)

    async def resume(self, hostname: str) -> Done:
        """Let a paused node run again and set its clock; a running node is left as it is."""
        node = await settled(self._registry, hostname)
        with running(node, Op.RESUME) as outcome:
            if outcome is Outcome.DONE:
                return Done(Op.RESUME, hostname, changed=False)
            machine = node.machine
            assert machine is not None
            await drive("resume", hostname, machine.resume(), machine)
            node.set(Status.RUNNING)
            if node.agent is not None:
                sync_clock(hostname, node.agent, self._parts.wall_clock)
        log.info("resumed node {hostname}", hostname=hostname)
        return Done(Op.RESUME, hostname)

    async def shutdown(self, hostname: str, op: Op) -> Done:
        """
        :data:`Op.REBOOT`: reset the VM (the guest boots again, its agent
        reconnects).  :data:`Op.SHUTDOWN`: press the ACPI power button (again
        every few seconds) and kill the VM if it has not powered off within
        the grace; the node then ends as any VM that stops on its own does
        (persistent: ``Stopped``; ephemeral: removed).  Answers at once.
        """
        node = await settled(self._registry, hostname)
        with running(node, op):
            machine = node.machine
            assert machine is not None
            if op is Op.REBOOT:
                await drive("reboot", hostname, machine.reset(), machine)
                node.announce(EventType.REBOOTED)
                log.info("rebooting node {hostname}", hostname=hostname)
                return Done(op, hostname)
            # Until the VM is gone, other lifecycle operations answer 409
            # busy (a pause would freeze a guest half-way through power-off).
            node.set(Status.STOPPING)
            stopping = machine.stop(True, self._parts.stop_grace)
            stopping.addErrback(lambda failure: log.failure("shutdown of {hostname}", failure, hostname=hostname))
        log.info("shutting down node {hostname}", hostname=hostname)
        return Done(op, hostname)

    async def relaunch(self, hostname: str, wait: Wait, timeout: float) -> NodeRecord:
        """
        Boot a stopped (or suspended: its snapshot is discarded) node again
        from its own disk, with the same hostname, address and tags.  It is
        admitted first (:mod:`.admission`: memory, then a cold boot slot
        within ``timeout``).

        :raise InsufficientMemory: it does not fit in the memory budget; the
            node is left as it was.
        :raise WaitTimeout: no boot slot within ``timeout`` (nothing was done),
            or the agent did not answer in time with ``wait``.
        :raise StateDirFull: no room for its record; the node is left as it was.
        """
        node = await settled(self._registry, hostname)
        with running(node, Op.RELAUNCH), room_for(f"the relaunch of node {hostname!r}"):
            group = self._parts.catalog.config.group(node.record.hostgroup)
            if group is None:
                raise Conflict(
                    f"the host group {node.record.hostgroup!r} of node {hostname!r} is no longer configured",
                    code="hostgroup_gone",
                )
            image = self._parts.catalog.image(group, node.record.image)
            if not os.path.exists(node.paths.disk):
                raise Internal(f"the disk of node {hostname!r} is missing", code="disk_missing")
            before = node.record.status
            admission = self._parts.admission
            claim = admission.admit(node.record.ram_bytes, hostname=hostname)
            try:
                slot = await admission.boot_slot(timeout, f"node {hostname!r}")
                try:
                    net = await self._parts.addressing.attach(node.record)
                    machine = await node.spawn(Cold(image.kernel.path, image.initrd.path), net)
                    node.set(Status.RUNNING, clone_memory=False)  # a clone boots as a node of its own
                except BaseException:
                    slot.release()
                    await node.release()
                    set_anyway(node, before, pid=None)  # a suspended node keeps its snapshot
                    raise
                node.paths.discard_snapshot()
                slot.hold(node.connect_agent().when_ready(), machine.ended)
            finally:
                claim.release()
        log.info("relaunched node {hostname}", hostname=hostname)
        await wait_after(self._parts.clock, node, wait, timeout)
        return visible(node.record)


__all__ = ["Lifecycle"]
