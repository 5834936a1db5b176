# -*- test-case-name: tests.nodes.test_lifecycle -*-
"""
The start-up recovery: what the daemon does with the nodes it finds on disk,
after a clean stop or a crash.

For each record: is its VM still running, and is it that node's (its pid,
its command line naming the node's QMP socket, its run state); is there a
complete snapshot.  :func:`.recovery.decide` (pure) turns those facts into
a decision, carried out here: adopt the VM, let a half-suspended one run
again, keep the node stopped or suspended, or remove it.  Then VMs of this
state directory that no record claims are killed, and the network objects of
addresses no node holds are removed.
"""

from __future__ import annotations

from typing import Callable

from twisted.logger import Logger

from ..hypervisors.base import HypervisorError, IMachine, IVmProcesses
from .model import NodeRecord, Status
from .recovery import decide
from .registry import Registry
from .runtime import NodeRuntime
from .runtime_parts import RuntimeParts

log = Logger()


class Startup:
    """
    :param registry: the nodes (empty when the recovery starts).
    :param make: registers a node for a record found on disk.
    :param parts: what the nodes are made with (their records, networks).
    :param vms: the VMs an earlier run left: adopted, found and killed
        without waiting for the driver's decision.
    :param vm_directory: where the VMs of templates and spares run (those an
        earlier run left are killed); ``None`` for none.
    """

    def __init__(self, registry: Registry, make: Callable[[NodeRecord], NodeRuntime], parts: RuntimeParts,
                 vms: IVmProcesses, vm_directory: str | None = None) -> None:
        self._registry = registry
        self._make = make
        self._parts = parts
        self._vms = vms
        self._vm_directory = vm_directory

    async def recover(self) -> None:
        """Recover every node on disk, then clean up what no node claims."""
        store = self._parts.store
        records, strays = store.load_all()
        for name in strays:
            log.info("removing stray node directory {name}", name=name)
            store.remove(name)
        # Registered at once (phase Starting): operations on them wait.
        nodes = [self._make(record) for record in records]
        # Running VMs are adopted at once: none waits for the hypervisor's
        # decision (the KVM probe), which only VMs started from now on need.
        vms = self._vms
        for node in nodes:
            try:
                await self._recover(vms, node)
            except Exception:
                log.failure("recovering node {hostname} failed", hostname=node.hostname)
            finally:
                node.started()
        # Spare every VM this run knows, not only the adopted ones: a create,
        # relaunch or restore may have started one meanwhile.
        known = {node.machine.pid for node in self._registry.all() if node.machine is not None}
        for pid in vms.orphans(store.nodes_dir, 1):
            if pid not in known:
                log.info("killing VM process {pid}, which no node record claims", pid=pid)
                vms.kill_orphan(pid)
        # A template's VM left by a run that ended during its build, and spare VMs no node was handed.
        directory = self._vm_directory
        if directory is not None:
            for pid in vms.orphans(directory, 1) + vms.orphans(directory, 2):
                if pid not in known:
                    log.info("killing template or spare VM process {pid} of an earlier run", pid=pid)
                    vms.kill_orphan(pid)
        # Every node's own network objects stay: adopted ones are in use,
        # others were detached above, and a create may be under way meanwhile
        # (so the list is taken when the host's objects have been listed).
        for name in await self._parts.addressing.clean_orphans(self._registry.addresses):
            log.info("removed network leftover {name}", name=name)

    async def _adopt(self, vms: IVmProcesses, node: NodeRuntime) -> tuple[IMachine | None, str | None]:
        """The node's VM if it still runs (and is its), and the VM's run state."""
        record = node.record
        if record.pid is None:
            return None, None
        spec = node.paths.spec(record, record.kernel, record.initrd)
        try:
            machine = vms.adopt(spec, record.pid, node.paths.qemu_log, record.started_qmp or None)
            return machine, await machine.run_state()
        except HypervisorError as error:
            log.info("node {hostname}: its VM (pid {pid}) is not running: {error}",
                     hostname=node.hostname, pid=record.pid, error=error)
            return None, None

    async def _recover(self, vms: IVmProcesses, node: NodeRuntime) -> None:
        machine, vm_state = await self._adopt(vms, node)
        paths = node.paths
        plan = decide(node.record, vm_state, paths.has_snapshot())
        paths.discard_partial_snapshot()
        if not plan.adopt:
            if machine is not None:
                await machine.kill()
            await self._parts.addressing.detach(node.record)
        if plan.status is None:
            log.info("removing node {hostname} (was {status})", hostname=node.hostname,
                     status=node.record.status.value)
            node.forget()
            return
        if plan.status is not Status.SUSPENDED:
            paths.discard_snapshot()
        if not plan.adopt or machine is None:
            node.set(plan.status, pid=None, forking=False)
            return
        node.own(machine)
        if plan.resume:
            await machine.resume()
        node.set(plan.status, forking=False)
        node.connect_agent()
        log.info("adopted node {hostname} ({status}, pid {pid})",
                 hostname=node.hostname, status=plan.status.value, pid=machine.pid)


__all__ = ["Startup"]
