# -*- test-case-name: tests.api.test_app,tests.api.test_vm,tests.nodes.test_readiness -*-
"""
Per-VM routes that read a node: its description, its console log and its
agent's health.

The console (``GET /vm/{hostname}/logs``) is a tail of at most :data:`MAX_LINES`
lines, or, for ``lines=0``, all the daemon keeps of it, streamed
(:mod:`.console_body`).

The description (``GET /vm/{hostname}``) is the node's listing entry plus
what a user needs to see of it (:mod:`vmservice.nodes.description`): fields
the daemon does not know are left out.

Health answers within a bounded time (:data:`vmservice.nodes.readiness.HEALTH_LIMIT`)
whatever the agent is doing: 200 with the agent's answer; 409 when the node
is in a state without an agent (paused, stopped, suspended, busy); 503 when
it should answer but does not.  HEAD answers the same statuses without a body.
"""

from __future__ import annotations

import attrs
from attrs import frozen
from twisted.web.iweb import IRequest
from twisted.web.server import Request

from ..errors import ServiceError
from ..nodes.description import NetworkFacts, NodeDescription as Description
from ..nodes.fleet import Fleet
from ..nodes.readiness import HEALTH_LIMIT
from .console_body import write_console
from .models.meta import ErrorResponse
from .models.nodes import AgentHealth, DiskDescription, LogsResponse, NetworkDescription, NetworkPolicy, NodeDescription
from .nodes import node_json
from .query import Integer, NoQuery, param
from .rendering import json_body
from .routing import Reply, Route

#: Lines of the console returned when ``lines`` is not given.
DEFAULT_LINES = 20
#: The most lines a tail may ask for (more is a 400): a tail is built in memory; all of the
#: console (``lines=0``) is streamed instead.
MAX_LINES = 10_000


@frozen
class LogsQuery:
    """How much of the console to return."""

    lines: int = param(Integer(minimum=0, maximum=MAX_LINES),
                       f"Lines from the end (default {DEFAULT_LINES}, at most {MAX_LINES}); 0 for all of the "
                       "console the daemon keeps (console_log_size), streamed", default=DEFAULT_LINES)


def _network_json(facts: NetworkFacts) -> NetworkDescription:
    policy = NetworkPolicy(allow=list(facts.allow), drop=list(facts.drop))
    return NetworkDescription(
        mode=facts.mode, policy_source="host_group", host_group=policy, effective=policy,
        address=facts.address, gateway=facts.gateway, mac=facts.mac, bridge=facts.bridge,
    )


def description_json(description: Description) -> NodeDescription:
    """The answer of ``GET /vm/{hostname}``."""
    record, disk, network = description.record, description.disk, description.network
    node = node_json(record)
    return NodeDescription(
        **{name: getattr(node, name) for name in attrs.fields_dict(type(node))},
        protected=record.protected,
        snapshot=description.snapshot,
        agent_connected=description.agent_connected,
        storage=description.storage,
        image=description.image,
        network=_network_json(network) if network is not None else None,
        disk=DiskDescription(path=disk.path, format=disk.format, size_bytes=disk.size_bytes,
                             allocated_bytes=disk.allocated_bytes, backing_file=disk.backing_file)
        if disk is not None else None,
        pid=record.pid,
        kernel=record.kernel or None,
        initrd=record.initrd or None,
        hypervisor=record.hypervisor or None,
        pci_devices=list(record.pci_devices) or None,
        idle_suspended=record.idle_suspended or None,
    )


class VmApi:
    """:param fleet: the nodes of this daemon."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/vm/{hostname}", self.describe, "Describe the node", "vm",
                  {200: Reply("The node, its storage, image and network, and what is found on the host",
                              NodeDescription)}),
            Route("GET", "/vm/{hostname}/logs", self.logs, "The node's serial console", "vm",
                  {200: Reply("The last lines of the console (all of it, streamed, for lines=0: then `lines` "
                              "comes after `content`)", LogsResponse)}, query=LogsQuery),
            Route("GET", "/vm/{hostname}/health", self.health, "Health of the node's agent", "vm",
                  {200: Reply("The agent answered", AgentHealth),
                   409: Reply("The node is paused, stopped, suspended or busy: no agent can answer (HEAD: no body)",
                              ErrorResponse),
                   503: Reply(f"The agent does not answer within {HEALTH_LIMIT:g} s (HEAD: no body)", ErrorResponse)},
                  head=True),
        ]

    async def describe(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        return json_body(request, description_json(await self._fleet.describe(hostname)))

    async def logs(self, request: Request, query: LogsQuery, hostname: str) -> bytes:
        if query.lines == 0:
            return await write_console(request, hostname, self._fleet.consoles.stream(hostname))
        content, count = await self._fleet.consoles.tail(hostname, query.lines)
        return json_body(request, LogsResponse(hostname=hostname, lines=count, content=content))

    async def health(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        record = self._fleet.node(hostname)
        if request.method == b"HEAD":
            try:
                await self._fleet.health(hostname)
            except ServiceError as error:
                request.setResponseCode(error.status)
                return b""
            request.setResponseCode(200)
            return b""
        health = await self._fleet.health(hostname)
        return json_body(
            request,
            AgentHealth(
                hostname=hostname,
                agent_uptime=health.agent_uptime,
                agent_version=health.agent_version,
                system_uptime=health.system_uptime,
                userdata_ran=health.userdata_ran,
                userdata_exit_code=health.userdata_exit_code,
                ip=record.ip,
            ),
        )
