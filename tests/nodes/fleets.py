"""
Fleets of fakes as the daemon's composition root wires them: :class:`FleetKit`,
one record of every collaborator a fleet and its warm start are built from
(a test changes one with ``attrs.evolve``), built by :func:`fleet_of`; and
:class:`RecordingMetrics`, which keeps what the node layer measures.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from attrs import Factory, define, field, frozen
from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorTime

from vmservice.config import Config
from vmservice.devices.pci import PciHost
from vmservice.guestport.guest import IGuestConnection
from vmservice.hypervisors.base import IVmProcesses
from vmservice.images.store import Image
from vmservice.nodes.addressing import Addressing
from vmservice.nodes.admission import Admission
from vmservice.nodes.blocking import Blocking
from vmservice.nodes.catalog import Catalog
from vmservice.nodes.driver_choice import DriverChoice
from vmservice.nodes.events import EventHub
from vmservice.nodes.fleet import Fleet
from vmservice.nodes.node_metrics import NodeMetrics, NullMetrics
from vmservice.nodes.provisioning import SecretSource
from vmservice.nodes.room import RoomWatch
from vmservice.nodes.runtime_parts import RuntimeParts
from vmservice.nodes.store import NodeStore
from vmservice.nodes.warm.adoption import ICloneAdoption
from vmservice.nodes.warm.starts import WarmStarts
from vmservice.nodes.warm.templates import TemplateStore
from vmservice.storage.interfaces import IDisks


@define
class RecordingMetrics:
    """What the node layer measured, each call's arguments in order (a :class:`NodeMetrics`)."""

    boots: list[tuple[str, float]] = Factory(list)
    restores: list[tuple[str, float]] = Factory(list)
    clones: list[tuple[str, float]] = Factory(list)
    warm_fallbacks: list[tuple[str, str]] = Factory(list)
    idle: list[tuple[str, str, float]] = Factory(list)

    def observe_boot(self, group: str, seconds: float) -> None:
        self.boots.append((group, seconds))

    def observe_restore(self, group: str, seconds: float) -> None:
        self.restores.append((group, seconds))

    def observe_clone(self, group: str, seconds: float) -> None:
        self.clones.append((group, seconds))

    def observe_warm_fallback(self, group: str, reason: str) -> None:
        self.warm_fallbacks.append((group, reason))

    def observe_idle(self, group: str, what: str, seconds: float) -> None:
        self.idle.append((group, what, seconds))


def _no_snapshots(socket: str, deadline: float) -> Deferred[Mapping[str, Any]]:
    return fail(LookupError("no metrics channel is configured"))


@frozen
class FleetKit:
    """Every collaborator of a fleet of fakes (see :class:`~vmservice.nodes.fleet.Fleet`'s parameters)."""

    clock: IReactorTime
    config: Config
    store: NodeStore
    driver: DriverChoice
    vms: IVmProcesses
    images: Callable[[str], Image]
    disks: IDisks
    agents: Callable[[str], IGuestConnection]
    addressing: Addressing
    blocking: Blocking
    events: EventHub
    secrets: SecretSource | None = None
    codehost_keys: Callable[[str], Deferred[tuple[str, ...]]] | None = None
    metrics: NodeMetrics = field(factory=NullMetrics)
    stop_grace: float = 10.0
    wall_clock: Callable[[], int] = field(default=time.time_ns)
    pci: PciHost = field(factory=PciHost)
    snapshots: Callable[[str, float], Deferred[Mapping[str, Any]]] = field(default=_no_snapshots)
    admission: Admission = field(factory=Admission.unlimited)
    room: RoomWatch | None = None

    def nodes(self) -> RuntimeParts:
        """What the fleet's nodes are made with."""
        return RuntimeParts(self.clock, self.config, self.store, self.driver, self.agents, self.addressing,
                            self.disks, self.events, self.pci, self.secrets, self.room, self.metrics)

    def catalog(self) -> Catalog:
        """The host groups and images."""
        return Catalog(self.config, self.images)


def fleet_of(kit: FleetKit, templates: TemplateStore | None = None, adoption: ICloneAdoption | None = None) -> Fleet:
    """A fleet of ``kit``, its warm groups cloned from ``templates`` with ``adoption`` (none by default)."""
    nodes, catalog = kit.nodes(), kit.catalog()
    warm = WarmStarts(nodes, catalog, kit.admission, kit.blocking, templates, adoption)
    return Fleet(nodes, catalog, warm, admission=kit.admission, vms=kit.vms, blocking=kit.blocking,
                 snapshots=kit.snapshots, codehost_keys=kit.codehost_keys, stop_grace=kit.stop_grace,
                 wall_clock=kit.wall_clock)
