# -*- test-case-name: tests.cluster.test_node_phase -*-
"""
Where the node stands in the cluster, as an automat machine (diagram:
``docs/state-machines/cluster-node.dot``): ``Idle`` until the daemon starts,
``Registering`` (its Node made or brought up to date, tried again after a
back-off), ``Registered`` (the Lease and status loops started, no Lease
renewed yet), ``Renewing`` (the last renewal went through), ``Lapsing`` (the
last one failed: the control plane marks the Node NotReady once its Lease
is older than its grace period), ``Stopped`` (the loops ended; the Node and
its Lease are left as they are).

The machine decides what is logged (the registration, the first Lease,
each failure, the recovery) and when the loops start; the
:class:`~vmservice.cluster.node_controller.NodeController` does the calls
and the timing, and tells the machine their outcomes.  Outcomes that arrive
after the stop are ignored.
"""

from __future__ import annotations

from typing import Callable, Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder
from twisted.logger import Logger

log = Logger(namespace="vmservice.cluster")


class PhaseInputs(Protocol):
    """What happens to the node."""

    def start(self) -> None:
        """The daemon starts."""

    def registered(self) -> None:
        """The Node is made, or brought up to date."""

    def register_failed(self, reason: str) -> None:
        """An attempt to register failed."""

    def renewed(self) -> None:
        """The Lease was renewed (or made)."""

    def renew_failed(self, reason: str) -> None:
        """A renewal failed."""

    def stop(self) -> None:
        """The daemon stops."""


@define
class PhaseCore:
    """
    What the machine sets going.

    :ivar name: the Node's name, for the log.
    :ivar register: try to register (now).
    :ivar register_later: try again after a back-off.
    :ivar run_loops: start the Lease and status loops.
    :ivar halt: end every loop and call under way.
    """

    name: str
    register: Callable[[], None]
    register_later: Callable[[], None]
    run_loops: Callable[[], None]
    halt: Callable[[], None]


def _build_phase() -> TypeMachine[PhaseInputs, PhaseCore]:
    builder = TypeMachineBuilder(PhaseInputs, PhaseCore)
    idle, registering, registered = builder.state("Idle"), builder.state("Registering"), builder.state("Registered")
    renewing, lapsing, stopped = builder.state("Renewing"), builder.state("Lapsing"), builder.state("Stopped")

    @idle.upon(PhaseInputs.start).to(registering)
    def begin(inputs: PhaseInputs, core: PhaseCore) -> None:
        core.register()

    @registering.upon(PhaseInputs.register_failed).loop()
    def again(inputs: PhaseInputs, core: PhaseCore, reason: str) -> None:
        log.warn("cluster node {name}: registration failed ({reason}); trying again", name=core.name, reason=reason)
        core.register_later()

    @registering.upon(PhaseInputs.registered).to(registered)
    def joined(inputs: PhaseInputs, core: PhaseCore) -> None:
        log.info("cluster node {name}: registered", name=core.name)
        core.run_loops()

    @registered.upon(PhaseInputs.renewed).to(renewing)
    def first_lease(inputs: PhaseInputs, core: PhaseCore) -> None:
        log.info("cluster node {name}: first lease renewed", name=core.name)

    @registered.upon(PhaseInputs.renew_failed).to(lapsing)
    @renewing.upon(PhaseInputs.renew_failed).to(lapsing)
    @lapsing.upon(PhaseInputs.renew_failed).loop()
    def lapse(inputs: PhaseInputs, core: PhaseCore, reason: str) -> None:
        log.warn("cluster node {name}: lease renewal failed ({reason}); trying again", name=core.name, reason=reason)

    renewing.upon(PhaseInputs.renewed).loop().returns(None)

    @lapsing.upon(PhaseInputs.renewed).to(renewing)
    def recovered(inputs: PhaseInputs, core: PhaseCore) -> None:
        log.info("cluster node {name}: lease renewed again", name=core.name)

    @idle.upon(PhaseInputs.stop).to(stopped)
    @registering.upon(PhaseInputs.stop).to(stopped)
    @registered.upon(PhaseInputs.stop).to(stopped)
    @renewing.upon(PhaseInputs.stop).to(stopped)
    @lapsing.upon(PhaseInputs.stop).to(stopped)
    def halt(inputs: PhaseInputs, core: PhaseCore) -> None:
        core.halt()

    stopped.upon(PhaseInputs.stop).loop().returns(None)
    stopped.upon(PhaseInputs.registered).loop().returns(None)
    stopped.upon(PhaseInputs.renewed).loop().returns(None)
    for late in (PhaseInputs.register_failed, PhaseInputs.renew_failed):
        stopped.upon(late).loop().returns(None)
    return builder.build()


#: The node's phase; calling it with a :class:`PhaseCore` gives one, ``Idle``.
PHASE_MACHINE = _build_phase()

__all__ = ["PHASE_MACHINE", "PhaseCore", "PhaseInputs"]
