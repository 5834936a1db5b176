# -*- test-case-name: tests.api.test_nodes -*-
"""
Routes of host groups and nodes: list groups, list/create/delete nodes.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.web.iweb import IRequest

from ..nodes.fleet import Fleet
from ..nodes.model import NodeRecord
from . import inputs
from .models import CreateNodeRequest, CreateNodeResponse, DeleteResponse, HostGroup, Node
from .rendering import json_body
from .routing import Param, Reply, Route

_FILTERS = (
    Param("tag", "Only nodes with this exact tag"),
    Param("tag_prefix", "Only nodes with a tag starting with this text"),
)


def node_json(record: NodeRecord) -> Node:
    """The listing entry of a node record."""
    return Node(
        hostname=record.hostname,
        hostgroup=record.hostgroup,
        ip=record.ip,
        ram_bytes=record.ram_bytes,
        cpus=record.cpus,
        created_at=record.created_at,
        tags=list(record.tags),
        arch=record.arch,
        status=record.status.value,
        persistent=record.persistent,
    )


def create_response(record: NodeRecord) -> CreateNodeResponse:
    """The answer of create and relaunch."""
    return CreateNodeResponse(
        hostname=record.hostname, hostgroup=record.hostgroup, ip=record.ip,
        created_at=record.created_at, arch=record.arch,
    )


def shielded(d: Deferred[Any]) -> Deferred[Any]:
    """
    A Deferred that follows ``d`` but whose cancellation (the client went
    away) does not cancel ``d``: a create the client stopped waiting for
    still completes or cleans up after itself.
    """
    follower: Deferred[Any] = Deferred()

    def forward(result: Any) -> None:
        if not follower.called:
            follower.callback(result)

    d.addBoth(forward)
    return follower


class NodesApi:
    """:param fleet: the nodes of this daemon."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/hostgroup", self.list_groups, "List host groups", "nodes",
                  {200: Reply("The host groups", HostGroup, array=True)}),
            Route("GET", "/hostgroup/{name}/nodes", self.list_group_nodes, "List the nodes of a host group", "nodes",
                  {200: Reply("The nodes", Node, array=True)}, query=_FILTERS),
            Route(
                "POST", "/hostgroup/{name}/nodes", self.create, "Create a node", "nodes",
                {201: Reply("The node was created", CreateNodeResponse)},
                query=(
                    Param("wait", "Answer only once the node is ready", enum=("agent", "userdata")),
                    Param("timeout", "How long to wait (Go duration, default 5m); past it the node is removed and 408 returned"),
                ),
                body=CreateNodeRequest,
            ),
            Route("DELETE", "/hostgroup/{name}/nodes/{node}", self.delete, "Delete a node", "nodes",
                  {200: Reply("The node was deleted", DeleteResponse)}),
            Route("GET", "/nodes", self.list_nodes, "List all nodes", "nodes",
                  {200: Reply("The nodes", Node, array=True)}, query=_FILTERS),
        ]

    async def list_groups(self, request: IRequest) -> bytes:
        groups = [
            HostGroup(name=g.name, count=g.count, ram_bytes=g.ram_bytes, cpus=g.vcpu, gpu_count=0, arch=g.arch)
            for g in self._fleet.groups()
        ]
        return json_body(request, groups)

    def _filtered(self, request: IRequest, group: str | None) -> list[Node]:
        tag = inputs.query(request, "tag") or None
        tag_prefix = inputs.query(request, "tag_prefix") or None
        return [node_json(r) for r in self._fleet.list(group, tag=tag, tag_prefix=tag_prefix)]

    async def list_group_nodes(self, request: IRequest, name: str) -> bytes:
        return json_body(request, self._filtered(request, name))

    async def list_nodes(self, request: IRequest) -> bytes:
        return json_body(request, self._filtered(request, None))

    async def create(self, request: IRequest, name: str) -> bytes:
        wanted = inputs.create_request(request)
        wait, timeout = inputs.wait_params(request)
        record = await shielded(Deferred.fromCoroutine(self._fleet.create(name, wanted, wait, timeout)))
        return json_body(request, create_response(record), 201)

    async def delete(self, request: IRequest, name: str, node: str) -> bytes:
        result = await shielded(Deferred.fromCoroutine(self._fleet.delete(name, node)))
        message = f"node {result.hostname} deleted"
        return json_body(request, DeleteResponse(message, "true" if result.disk_removed else "false", ""))
