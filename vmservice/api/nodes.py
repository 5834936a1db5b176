# -*- test-case-name: tests.api.test_app -*-
"""
Routes of host groups and nodes: list groups, list/create/delete nodes.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.web.iweb import IRequest

from ..nodes.fleet import Fleet
from ..nodes.model import NodeRecord
from .inputs.lifecycle import timeout_param, wait_for, wait_param
from .inputs.nodes import create_request
from .models.meta import ErrorResponse
from .models.nodes import CreateNodeRequest, CreateNodeResponse, DeleteResponse, HostGroup, Node
from .query import NoQuery, Text, param
from .rendering import json_body
from .routing import Reply, Route


@frozen
class NodeFilter:
    """The filters of a node listing (an empty one is no filter)."""

    tag: str = param(Text(), "Only nodes with this exact tag", default="")
    tag_prefix: str = param(Text(), "Only nodes with a tag starting with this text; not with tag", default="")


@frozen
class CreateQuery:
    """What a create waits for."""

    wait: str | None = wait_param("Answer only once the node is ready")
    timeout: float = timeout_param("the node is removed and 408 returned")


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
                  {200: Reply("The nodes", Node, array=True)}, query=NodeFilter),
            Route(
                "POST", "/hostgroup/{name}/nodes", self.create, "Create a node", "nodes",
                {201: Reply("The node was created", CreateNodeResponse),
                 409: Reply("max_nodes_reached: the host group has its max_nodes; hostname_taken, ip_taken ...",
                            ErrorResponse),
                 503: Reply("insufficient_memory: the node does not fit in the memory budget; tmpfs_full (fork_memory: "
                            "file): its memory file does not fit the tmpfs (nothing was made)",
                            ErrorResponse),
                 507: Reply("state_dir_full: the daemon's state directory has no room for the node (nothing was made)",
                            ErrorResponse)},
                query=CreateQuery,
                body=CreateNodeRequest,
            ),
            Route("DELETE", "/hostgroup/{name}/nodes/{node}", self.delete, "Delete a node", "nodes",
                  {200: Reply("The node was deleted", DeleteResponse)}),
            Route("GET", "/nodes", self.list_nodes, "List all nodes", "nodes",
                  {200: Reply("The nodes", Node, array=True)}, query=NodeFilter),
        ]

    async def list_groups(self, request: IRequest, query: NoQuery) -> bytes:
        groups = [
            HostGroup(name=g.name, count=g.count, ram_bytes=g.ram_bytes, cpus=g.vcpu, gpu_count=len(g.gpus),
                      arch=g.arch)
            for g in self._fleet.groups()
        ]
        return json_body(request, groups)

    def _filtered(self, query: NodeFilter, group: str | None) -> list[Node]:
        records = self._fleet.list(group, tag=query.tag or None, tag_prefix=query.tag_prefix or None)
        return [node_json(r) for r in records]

    async def list_group_nodes(self, request: IRequest, query: NodeFilter, name: str) -> bytes:
        return json_body(request, self._filtered(query, name))

    async def list_nodes(self, request: IRequest, query: NodeFilter) -> bytes:
        return json_body(request, self._filtered(query, None))

    async def create(self, request: IRequest, query: CreateQuery, name: str) -> bytes:
        wanted = create_request(request)
        wait = wait_for(query.wait)
        record = await shielded(Deferred.fromCoroutine(self._fleet.create(name, wanted, wait, query.timeout)))
        return json_body(request, create_response(record), 201)

    async def delete(self, request: IRequest, query: NoQuery, name: str, node: str) -> bytes:
        result = await shielded(Deferred.fromCoroutine(self._fleet.delete(name, node)))
        message = f"node {result.hostname} deleted"
        return json_body(request, DeleteResponse(message, "true" if result.disk_removed else "false", ""))
