# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.warm.test_fork_memory,tests.nodes.warm.test_forking -*-
"""
What no node names any more, found and deleted: a fork's memory copies in the
tmpfs, a fork's frozen disks, a template's files; once when the daemon starts
(what an earlier run left) and again each time a node that named some of them
is forgotten.  Each takes the registry as it is now: the nodes' records say
what is still in use.
"""

from __future__ import annotations

from .model import NodeRecord
from .registry import Registry
from .warm_port import WarmStart


class Leftovers:
    """
    :param registry: the daemon's nodes.
    :param warm: what deletes the files of warm start (templates, forks,
        memory files).
    """

    def __init__(self, registry: Registry, warm: WarmStart) -> None:
        self._registry = registry
        self._warm = warm

    def _nodes(self) -> list[tuple[NodeRecord, bool]]:
        return [(node.record, node.machine is not None) for node in self._registry.all()]

    def at_start(self) -> None:
        """After the start-up recovery: what an earlier run left that no recovered node names."""
        self.templates()
        self.forks()
        self._warm.sweep(self._nodes())

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
        self._warm.collect_copies(self._nodes())

    def forks(self) -> None:
        """Delete the frozen disks of forks that no node names any more."""
        self._warm.collect_forks({path for node in self._registry.all() for path in node.record.forked_disks})

    def templates(self) -> None:
        """Delete the template files that no template in use and no node needs any more."""
        self._warm.collect_templates([node.record for node in self._registry.all()])


__all__ = ["Leftovers"]
