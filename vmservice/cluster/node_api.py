# -*- test-case-name: tests.cluster.test_api_client -*-
"""
:class:`NodeApi`: the calls the node controller makes of the API, for its
own Node and its own Lease (the only objects the Node authorizer lets it
touch besides its pods).
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import quote

from twisted.internet.defer import Deferred

from .api_client import MERGE_PATCH, ApiClient, Json

#: Where nodes' Leases are.
LEASE_NAMESPACE = "kube-node-lease"
#: The Lease API's path.
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"


class NodeApi:
    """
    One node's objects in the API.

    :param client: the API.
    :param name: the Node's (and its Lease's) name.
    """

    def __init__(self, client: ApiClient, name: str) -> None:
        self._client = client
        self.name = name
        self._node = f"/api/v1/nodes/{quote(name, safe='')}"
        self._lease = f"{LEASES}/{quote(name, safe='')}"

    def get_node(self) -> "Deferred[Json]":
        """The Node as it is."""
        return self._client.call("GET", self._node, kind="Node")

    def create_node(self, node: Mapping[str, Any]) -> "Deferred[Json]":
        """Register the Node."""
        return self._client.call("POST", "/api/v1/nodes", node, kind="Node")

    def patch_node(self, patch: Mapping[str, Any]) -> "Deferred[Json]":
        """Merge ``patch`` into the Node's metadata and spec (a list, such as taints, is replaced whole)."""
        return self._client.call("PATCH", self._node, patch, content_type=MERGE_PATCH, kind="Node")

    def patch_status(self, status: Mapping[str, Any]) -> "Deferred[Json]":
        """Merge ``status`` into the Node's status (its ``conditions`` list is replaced whole)."""
        return self._client.call("PATCH", self._node + "/status", {"status": status}, content_type=MERGE_PATCH,
                                 kind="Node")

    def get_lease(self) -> "Deferred[Json]":
        """The node's Lease as it is."""
        return self._client.call("GET", self._lease, kind="Lease")

    def create_lease(self, lease: Mapping[str, Any]) -> "Deferred[Json]":
        """Create the node's Lease."""
        return self._client.call("POST", LEASES, lease, kind="Lease")

    def update_lease(self, lease: Mapping[str, Any]) -> "Deferred[Json]":
        """Replace the node's Lease (its ``metadata.resourceVersion`` says which version it replaces: 409 if another)."""
        return self._client.call("PUT", self._lease, lease, kind="Lease")


__all__ = ["LEASES", "LEASE_NAMESPACE", "NodeApi"]
