# -*- test-case-name: tests.cluster.test_node_controller -*-
"""
:class:`LeaseKeeper`: the node's Lease in ``kube-node-lease``, made when
missing (held by the node, owned by its Node) and renewed by replacing it
with the version last read: a 409 (someone changed it meanwhile) reads it
again and tries once more, up to :data:`CONFLICT_RETRIES` times.
"""

from __future__ import annotations

import copy
from typing import Any

from twisted.internet.interfaces import IReactorTime

from ..config import KubernetesConfig
from .api_client import Json
from .api_errors import Conflict, NotFound
from .node_api import NodeApi
from .node_object import lease_manifest, micro_time

#: Times a renewal reads the Lease again after a 409 before it gives up until the next tick.
CONFLICT_RETRIES = 3


def renewed(lease: Json, config: KubernetesConfig, now: float) -> Json:
    """``lease`` (as read) renewed at ``now``, held by the node for its duration."""
    updated = copy.deepcopy(lease)
    spec: Any = updated.get("spec")
    if not isinstance(spec, dict):
        spec = updated["spec"] = {}
    spec.update(holderIdentity=config.node_name, leaseDurationSeconds=config.lease_duration_seconds,
                renewTime=micro_time(now))
    return updated


class LeaseKeeper:
    """
    The node's Lease.

    :param clock: the time written as ``renewTime``.
    :param api: the node's objects.
    :param config: the node's name and the Lease's duration.
    """

    def __init__(self, clock: IReactorTime, api: NodeApi, config: KubernetesConfig) -> None:
        self._clock, self._api, self._config = clock, api, config
        self._lease: Json | None = None
        #: The Node's uid, the owner of a Lease this makes.
        self.node_uid = ""

    async def _create(self) -> None:
        self._lease = await self._api.create_lease(lease_manifest(self._config, self.node_uid, self._clock.seconds()))

    async def renew(self) -> None:
        """
        Renew the Lease now (make it if it is missing).

        :raise ApiError: the renewal did not go through (the next tick tries again).
        """
        if self._lease is None:
            try:
                self._lease = await self._api.get_lease()
            except NotFound:
                return await self._create()
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                self._lease = await self._api.update_lease(renewed(self._lease, self._config, self._clock.seconds()))
                return None
            except NotFound:
                return await self._create()
            except Conflict:
                if attempt == CONFLICT_RETRIES:
                    raise
                self._lease = await self._api.get_lease()
        return None  # pragma: no cover - the loop returns or raises


__all__ = ["CONFLICT_RETRIES", "LeaseKeeper", "renewed"]
