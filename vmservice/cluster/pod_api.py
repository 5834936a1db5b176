# -*- test-case-name: tests.cluster.test_pod_controller -*-
"""
:class:`PodApi`: the calls the pod controller makes of the API, for the
pods bound to its Node (the Node authorizer lets a node read them, write
their status, delete them, read the Secrets they name and record Events).
"""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import quote

from twisted.internet.defer import Deferred

from .api_client import MERGE_PATCH, ApiClient, Json
from .pod_object import PodKey

#: The collection of every pod (watched with a field selector on the node's name).
PODS = "/api/v1/pods"


def _pod(key: PodKey) -> str:
    return f"/api/v1/namespaces/{quote(key.namespace, safe='')}/pods/{quote(key.name, safe='')}"


class PodApi:
    """
    The pods of one Node in the API.

    :param client: the API.
    """

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def get_pod(self, key: PodKey) -> "Deferred[Json]":
        """Pod ``key`` as it is (whatever its uid: the caller compares)."""
        return self.client.call("GET", _pod(key), kind="Pod")

    def patch_status(self, key: PodKey, status: Mapping[str, Any]) -> "Deferred[Json]":
        """Merge ``status`` into the pod's status (its ``conditions`` list is replaced whole)."""
        return self.client.call("PATCH", _pod(key) + "/status", {"status": status}, content_type=MERGE_PATCH,
                                kind="Pod")

    def delete_pod(self, key: PodKey) -> "Deferred[Json]":
        """Delete pod ``key`` at once (grace 0), only if it is still the pod of ``key.uid``."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": key.uid}}
        return self.client.call("DELETE", _pod(key), body)

    def get_secret(self, namespace: str, name: str) -> "Deferred[Json]":
        """Secret ``namespace/name`` (the Node authorizer allows those a pod bound here names)."""
        return self.client.call("GET", f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets/{quote(name, safe='')}",
                                kind="Secret")

    def post_event(self, namespace: str, event: Mapping[str, Any]) -> "Deferred[Json]":
        """Record ``event`` in ``namespace``."""
        return self.client.call("POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", event,
                                kind="Event")


__all__ = ["PODS", "PodApi"]
