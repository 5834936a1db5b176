# -*- test-case-name: tests.nodes.test_fleet -*-
"""
The nodes of this daemon by hostname, and the questions asked of them all.

A node being created or deleted is in the registry (its hostname and address
are taken) but not visible: looking it up is 404 and listings leave it out.
"""

from __future__ import annotations

from ipaddress import IPv4Address

from ..errors import BadRequest, NotFound
from .model import NodeRecord, Status, visible
from .runtime import NodeRuntime

#: Statuses of nodes that are not there yet, or not any more, for clients.
_HIDDEN = (Status.CREATING, Status.DELETING)


class Registry:
    """The nodes of one daemon."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeRuntime] = {}

    def add(self, node: NodeRuntime) -> None:
        """Register ``node`` under its hostname."""
        self._nodes[node.hostname] = node

    def drop(self, node: NodeRuntime) -> None:
        """Unregister ``node`` (and not another node of that name made since)."""
        if self._nodes.get(node.hostname) is node:
            del self._nodes[node.hostname]

    def __contains__(self, hostname: str) -> bool:
        return hostname in self._nodes

    def all(self) -> list[NodeRuntime]:
        """Every node, visible or not."""
        return list(self._nodes.values())

    def find(self, hostname: str) -> NodeRuntime:
        """
        The visible node ``hostname``.

        :raise NotFound: there is none (or it is being created or deleted).
        """
        node = self._nodes.get(hostname)
        if node is None or node.record.status in _HIDDEN:
            raise NotFound(f"node {hostname!r} not found", code="node_not_found")
        return node

    def addresses(self) -> set[IPv4Address]:
        """The addresses held by nodes."""
        return {IPv4Address(node.record.ip) for node in self._nodes.values() if node.record.ip}

    def pci_claims(self) -> dict[str, str]:
        """The host PCI devices held by nodes: address to hostname."""
        return {address: node.hostname for node in self._nodes.values() for address in node.record.pci_devices}

    def listing(
        self, group: str | None = None, tag: str | None = None, tag_prefix: str | None = None
    ) -> list[NodeRecord]:
        """
        The visible nodes as clients see them, oldest first, optionally of one
        group and filtered by an exact tag or a tag prefix (not both).

        :raise BadRequest: both filters given.
        """
        if tag is not None and tag_prefix is not None:
            raise BadRequest("only one of tag and tag_prefix may be set", code="conflicting_filters")
        result = []
        for node in self._nodes.values():
            record = node.record
            if record.status in _HIDDEN:
                continue
            if group is not None and record.hostgroup != group:
                continue
            if tag is not None and tag not in record.tags:
                continue
            if tag_prefix is not None and not any(t.startswith(tag_prefix) for t in record.tags):
                continue
            result.append(visible(record))
        return sorted(result, key=lambda r: (r.created_at, r.hostname))


__all__ = ["Registry"]
