# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.warm.test_forking -*-
"""
What the node core asks of warm start, as protocols: the core (every module
of :mod:`vmservice.nodes` but :mod:`vmservice.nodes.warm`) imports nothing of
warm start, and :class:`vmservice.nodes.warm.starts.WarmStarts` implements
these, handed to the fleet by the daemon's composition root.

- :class:`~.runtime_parts.VmFiles`: what a node's VM keeps beside it (its memory
  file, a spare's directory), around each start and end;
- :class:`WarmStart`: that, and a new node's clone, the spare pools, the
  fleet's forks (:class:`Forks`), the files no node names any more and the
  daemon's stop.

:class:`ForkRequest` and :class:`Forked` are the fleet's words for a fork,
which the API uses too.
"""

from __future__ import annotations

from typing import Iterable, Protocol

from attrs import frozen

from ..config import HostGroupConfig
from ..guestport.guest import IGuestConnection
from ..hypervisors.base import IMachine, NetSpec
from ..images.store import Image
from .model import NodeRecord
from .new_nodes import NewNodes
from .runtime import NodeRuntime
from .runtime_parts import VmFiles


@frozen
class ForkRequest:
    """
    :ivar count: how many children (1 to :data:`.model.MAX_FORK_COUNT`).
    :ivar tags: the children's tags.
    :ivar persistent: whether the children are persistent; ``None`` for the parent's.
    """

    count: int = 1
    tags: tuple[str, ...] = ()
    persistent: bool | None = None


@frozen
class Forked:
    """
    What a fork made.

    :ivar children: the children's records, in order.
    :ivar pause: seconds the parent stood still.
    """

    children: tuple[NodeRecord, ...]
    pause: float


class Forks(Protocol):
    """Hot forks of the fleet's running nodes."""

    async def fork(self, hostname: str, request: ForkRequest) -> Forked:
        """Fork the running node ``hostname`` into ``request.count`` children."""


#: A clone's VM and its agent connection, and whether its agent answered its adoption.
Cloned = tuple[IMachine, IGuestConnection, bool]


class WarmStart(VmFiles, Protocol):
    """Everything the node core asks of warm start (see the module's docstring)."""

    def memory_file(self, hostname: str, kind: str) -> str:
        """The memory file of a new node of a group whose ``fork_memory`` is ``kind``; empty for none."""

    async def clone(self, node: NodeRuntime, group: HostGroupConfig, image: Image,
                    net: NetSpec | None) -> Cloned | None:
        """A new node of a warm ``group`` started as a clone, or ``None``: it boots cold."""

    def ready_for_forks(self, hostname: str, agent: IGuestConnection) -> None:
        """In the background: a new node's guest loads what its children's adoption needs."""

    async def prepare(self, group: HostGroupConfig) -> None:
        """At start: the template of a warm ``group``'s nodes built ahead of its first create."""

    def room_freed(self) -> None:
        """Memory was given back (a node is gone): spares refused for lack of it may start."""

    def spare_ram(self) -> Iterable[int]:
        """The RAM of each spare VM, for the memory budget."""

    def forks(self, new: NewNodes) -> Forks:
        """The forks of the fleet's nodes, each child made through ``new``."""

    @property
    def vm_directory(self) -> str | None:
        """Where the VMs of templates and spares run (the start kills those an earlier run left); ``None``: none."""

    def collect_templates(self, records: list[NodeRecord]) -> None:
        """Delete the template files that no template in use and none of ``records`` needs any more."""

    def collect_forks(self, referenced: set[str]) -> None:
        """Delete the frozen disks of forks that no record names (``referenced``: those named)."""

    def collect_copies(self, nodes: list[tuple[NodeRecord, bool]]) -> None:
        """Delete the fork memory copies that no record of ``nodes`` (record, its VM runs) names."""

    def sweep(self, nodes: list[tuple[NodeRecord, bool]]) -> None:
        """At start: delete the memory and fork state files that none of ``nodes`` (recovered) needs."""

    def close(self) -> None:
        """The daemon stopped every VM: the memory directory and the templates are closed."""


__all__ = ["Cloned", "ForkRequest", "Forked", "Forks", "WarmStart"]
