# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.test_fork_memory,tests.nodes.test_forking -*-
"""
What no node names any more, found and deleted: a fork's memory copies in the
tmpfs, a fork's frozen disks, a template's files; once when the daemon starts
(what an earlier run left) and again each time a node that named some of them
is forgotten.  Each takes the registry as it is now: the nodes' records say
what is still in use.
"""

from __future__ import annotations

import os

from . import fork_memory
from .forking import collect_forks, discard_fork_states
from .model import NodeRecord
from .parts import FleetParts
from .registry import Registry


class Leftovers:
    """
    :param registry: the daemon's nodes.
    :param parts: the node layer's collaborators (the configuration's
        directories, the template store).
    """

    def __init__(self, registry: Registry, parts: FleetParts) -> None:
        self._registry = registry
        self._parts = parts

    @property
    def memory_directory(self) -> str:
        """The daemon's fork memory directory in the tmpfs."""
        config = self._parts.config
        return fork_memory.memory_directory(config.state_dir, config.templates_tmpfs_dir)

    def _nodes(self) -> list[tuple[NodeRecord, bool]]:
        return [(node.record, node.machine is not None) for node in self._registry.all()]

    def at_start(self) -> None:
        """After the start-up recovery: what an earlier run left that no recovered node names."""
        config = self._parts.config
        self.templates()
        self.forks()
        discard_fork_states(config.state_dir, config.templates_tmpfs_dir)
        fork_memory.sweep(self.memory_directory, set.union(*fork_memory.kept_files(self._nodes(), forking=False)))

    def forgotten(self, record: NodeRecord) -> None:
        """A node is gone: what its ``record`` named that no other node names."""
        if record.frozen_disk:
            self.templates()
        if record.forked_disks:
            self.forks()
        if record.memory_copies:
            self.copies()

    def copies(self) -> None:
        """Delete the fork memory copies that no node names any more."""
        fork_memory.collect_copies(self.memory_directory, fork_memory.kept_files(self._nodes())[1])

    def forks(self) -> None:
        """Delete the frozen disks of forks that no node names any more."""
        collect_forks(self._parts.config.state_dir,
                      {path for node in self._registry.all() for path in node.record.forked_disks})

    def templates(self) -> None:
        """Delete the template files that no template in use and no node needs any more."""
        templates = self._parts.templates
        if templates is not None:
            records = [node.record for node in self._registry.all()]
            templates.collect({record.frozen_disk for record in records if record.frozen_disk},
                              {os.path.dirname(record.started_qmp) for record in records if record.started_qmp})


__all__ = ["Leftovers"]
