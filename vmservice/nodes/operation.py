# -*- test-case-name: tests.nodes.test_lifecycle -*-
"""
The frame of every lifecycle operation: take the node once the start-up
recovery is done with it, decide with :mod:`.transitions`' table, hold other
operations off while it runs, drive the hypervisor, wait for the guest.
"""

from __future__ import annotations

from contextlib import contextmanager
import time
from typing import Any, Callable, Iterator, TypeVar

from attrs import field, frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ..errors import Conflict, Internal, NotSupported, ServiceError, WaitTimeout
from ..hypervisors.base import HypervisorError, IMachine, MachineExit
from .addressing import Addressing
from .admission import Admission
from .catalog import Catalog
from .driver_choice import DriverChoice
from .model import Status, Wait
from .node_metrics import NodeMetrics, NullMetrics
from .readiness import NotReady, wait_for_agent
from .registry import Registry
from .runtime import NodeRuntime
from .transitions import Op, Outcome, check

log = Logger()

_T = TypeVar("_T")


@frozen
class Done:
    """
    What a lifecycle operation did (the API words it).

    :ivar operation: which operation.
    :ivar hostname: on which node.
    :ivar changed: ``False`` when the node already was as asked (a repeated call).
    """

    operation: Op
    hostname: str
    changed: bool = True


@frozen
class OperationParts:
    """
    What the lifecycle operations (:mod:`.lifecycle`, :mod:`.snapshots`) act with.

    :ivar clock: times waits and restores.
    :ivar driver: the hypervisor driver (whether it can suspend).
    :ivar catalog: a node's host group and image, for a relaunch or a restore.
    :ivar admission: the memory budget and cold boots a relaunch or restore goes through.
    :ivar addressing: a node's network, attached again when its VM starts again.
    :ivar metrics: where a restore's duration is reported.
    :ivar stop_grace: seconds a graceful stop waits before it kills.
    :ivar wall_clock: the time in nanoseconds since the epoch, given to
        guests whose clock stood still (resume, restore).
    """

    clock: IReactorTime
    driver: DriverChoice
    catalog: Catalog
    admission: Admission
    addressing: Addressing
    metrics: NodeMetrics = field(factory=NullMetrics)
    stop_grace: float = 10.0
    wall_clock: Callable[[], int] = field(default=time.time_ns)


class NodeOperations:
    """
    Operations on the nodes of one daemon (:mod:`.lifecycle`, :mod:`.snapshots`).

    :param registry: the nodes.
    :param parts: what they act with.
    """

    def __init__(self, registry: Registry, parts: OperationParts) -> None:
        self._registry = registry
        self._parts = parts


async def settled(registry: Registry, hostname: str) -> NodeRuntime:
    """
    The node ``hostname`` once the start-up recovery is done with it: an
    operation asked right after the daemon started waits for the recovery
    instead of answering 409 ``busy``.

    :raise NotFound: there is no such node (or the recovery removed it).
    """
    node = registry.find(hostname)
    await node.settled()
    return registry.find(hostname)


@contextmanager
def running(node: NodeRuntime, op: Op) -> Iterator[Outcome]:
    """
    Run ``op`` on ``node``, one operation at a time per node; yields the
    table's outcome (:func:`.transitions.check`).

    :raise Conflict: another operation runs (``busy``) or the table says no.
    """
    node.phase.begin(op.value)
    try:
        yield check(op, node.hostname, node.record.status)
    finally:
        node.phase.finish()


async def drive(what: str, hostname: str, action: "Deferred[_T]", machine: IMachine | None = None) -> _T:
    """
    Wait for a driver action; its failure becomes a 500 that says what
    failed, or a 409 ``not_running`` when the VM ended meanwhile.
    """
    try:
        return await action
    except HypervisorError as error:
        if machine is None:
            raise Internal(f"{what} of node {hostname!r} failed: {error}", code=f"{what}_failed") from error
        raise failure_of(what, hostname, machine, error) from error


def ended(machine: IMachine) -> MachineExit | None:
    """How ``machine`` ended, or ``None`` while it runs (as far as this process has heard)."""
    exits: list[MachineExit] = []
    machine.ended.addCallback(exits.append)  # at once when it has ended
    return exits[0] if exits else None


def failure_of(what: str, hostname: str, machine: IMachine, error: BaseException) -> BaseException:
    """
    What an operation on node ``hostname`` that failed with ``error`` raises:
    a service error or a cancellation as it is; any other failure a 409
    ``not_running`` when ``machine`` ended meanwhile (what failed only
    followed from that: its files went with the node), else a 500
    ``<what>_failed`` that says it, raised from it (a lack of room among
    its causes stays visible, see :mod:`.room`).
    """
    if isinstance(error, (ServiceError, CancelledError)) or not isinstance(error, Exception):
        return error
    if ended(machine) is not None:
        return Conflict(f"node {hostname!r} is not running (its VM ended during the {what})", code="not_running")
    return Internal(f"{what} of node {hostname!r} failed: {error}", code=f"{what}_failed")


async def suspendable(choice: DriverChoice) -> None:
    """
    :raise NotSupported: the hypervisor driver cannot suspend VMs to disk (501).
    """
    driver = await choice.get()
    if not driver.capabilities.can_suspend:
        raise NotSupported(f"{driver.description} cannot suspend VMs to disk", code="not_supported")


async def wait_after(clock: IReactorTime, node: NodeRuntime, wait: Wait, timeout: float) -> None:
    """
    ``wait=agent`` of restore and relaunch (``wait=userdata`` waits the same:
    userdata runs at the first boot only): the node stays up when the wait fails.

    :raise WaitTimeout: the agent did not answer within ``timeout`` seconds.
    :raise Internal: (``boot_failed``) its VM ended first.
    """
    if wait is Wait.NONE or node.machine is None or node.agent is None:
        return
    try:
        await wait_for_agent(clock, node.machine, node.agent, timeout)
    except NotReady as error:
        if error.ended is None:
            raise WaitTimeout(
                f"the agent of node {node.hostname!r} did not answer within {timeout:g} s"
            ) from None
        raise Internal(f"node {node.hostname!r} failed to start: {error}", code="boot_failed") from None


def set_anyway(node: NodeRuntime, status: Status, **changes: Any) -> None:
    """
    Give ``node`` the status that is true now whatever its record on the
    disk can say: the one it had before a failed operation, or the outcome
    of one whose VM was already ended.  When the record cannot be written
    (the state directory is full) it keeps saying the operation's own
    status, which the next start finishes or undoes as after a crash
    (:mod:`.recovery`), and the operation's own outcome stands.
    """
    try:
        node.set(status, **changes)
    except OSError as error:
        log.warn("node {hostname}: its record could not be written back to {status}: {error}",
                 hostname=node.hostname, status=status.value, error=error)


__all__ = ["Done", "NodeOperations", "drive", "ended", "failure_of", "running", "set_anyway", "settled", "suspendable",
           "wait_after"]
