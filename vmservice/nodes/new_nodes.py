# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.warm.test_forking -*-
"""
What makes new nodes, a create's (:mod:`.creation`) and a fork's children
(:mod:`.warm.forking`) alike: :class:`NewNodes`.
"""

from __future__ import annotations

import os
from typing import Callable

from attrs import frozen

from ..config import HostGroupConfig
from .admission import Admission
from .catalog import Catalog
from .model import NodeRecord
from .registry import Registry
from .runtime import NodeRuntime
from .runtime_parts import RuntimeParts


@frozen
class NewNodes:
    """
    :ivar registry: the nodes, to which ``make`` adds a new one.
    :ivar make: registers a node for a new record.
    :ivar parts: what a new node is made with (its record, address, disk, VM).
    :ivar catalog: the host groups and the images a node is made of.
    :ivar admission: the memory budget, ``max_nodes`` and the cold boots
        queue a new node goes through.
    """

    registry: Registry
    make: Callable[[NodeRecord], NodeRuntime]
    parts: RuntimeParts
    catalog: Catalog
    admission: Admission

    def next_hostname(self, group: HostGroupConfig) -> str:
        """The group's next free ``<group>-<n>``."""
        store = self.parts.store
        while True:
            candidate = f"{group.name}-{store.next_index(group.name)}"
            if candidate not in self.registry and not os.path.exists(store.node_dir(candidate)):
                return candidate


__all__ = ["NewNodes"]
