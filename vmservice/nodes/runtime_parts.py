# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.test_lifecycle -*-
"""
What a node's runtime (:class:`.runtime.NodeRuntime`) is made with:
:class:`RuntimeParts`, the daemon's collaborators every node uses, and
:class:`VmFiles`, what warm start keeps beside a node's VM (given through
:mod:`.warm_port`).
"""

from __future__ import annotations

from typing import Callable, Protocol

from attrs import field, frozen
from twisted.internet.interfaces import IReactorTime

from ..config import Config
from ..devices.pci import PciHost
from ..guestport.guest import IGuestConnection
from ..storage.interfaces import IDisks
from .addressing import Addressing
from .driver_choice import DriverChoice
from .events import EventHub
from .model import NodeRecord
from .node_metrics import NodeMetrics, NullMetrics
from .provisioning import SecretSource
from .room import RoomWatch
from .store import NodeStore


class VmFiles(Protocol):
    """
    What warm start keeps beside a node's VM (:mod:`.warm_port`): a memory
    file made before the VM starts and gone once it ended, and the directory
    of a spare whose VM the node's own replaced.
    """

    def before_start(self, record: NodeRecord) -> None:
        """
        A VM of ``record`` starts: its memory file made (empty) when it has one.

        :raise InsufficientMemory: (``tmpfs_full``) no room for it.
        """

    def after_end(self, record: NodeRecord) -> bool:
        """``record``'s VM ended: its memory file gone; whether it names copies it no longer needs."""

    def spare_replaced(self, started_qmp: str) -> None:
        """Remove the directory of the spare whose QMP socket was ``started_qmp`` (its VM is gone)."""


@frozen
class RuntimeParts:
    """
    What a node's runtime is made with, and what makes, restores and ends
    runtimes (creation, forks, the start-up recovery, the daemon's stop) acts on.

    :ivar clock: times boots, waits and timeouts.
    :ivar config: the loaded configuration (a node's group).
    :ivar store: where node records live.
    :ivar driver: the hypervisor driver, once decided.
    :ivar agents: makes the agent connection of a node from its socket path and
        its group's ``agent_transport``.
    :ivar addressing: addresses and the host side of VM networks.
    :ivar disks: creates and removes node disks.
    :ivar events: where the nodes' lifecycle events are published.
    :ivar pci: the host's PCI devices, checked before one is given to a node.
    :ivar secrets: the secrets store, whose secrets nodes get; ``None`` for none.
    :ivar room: lets nodes whose VM stopped for lack of room in the state
        directory run on once it has room; ``None``: they stay stopped.
    :ivar metrics: where a boot's duration is reported.
    """

    clock: IReactorTime
    config: Config
    store: NodeStore
    driver: DriverChoice
    agents: Callable[[str, str], IGuestConnection]
    addressing: Addressing
    disks: IDisks
    events: EventHub
    pci: PciHost = field(factory=PciHost)
    secrets: SecretSource | None = None
    room: RoomWatch | None = None
    metrics: NodeMetrics = field(factory=NullMetrics)


__all__ = ["RuntimeParts", "VmFiles"]
