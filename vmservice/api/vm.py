# -*- test-case-name: tests.api.test_vm -*-
"""
Per-VM routes that read a node: its console log and its agent's health.
"""

from __future__ import annotations

from twisted.web.iweb import IRequest

from ..errors import AgentNotConnected
from ..nodes.fleet import Fleet
from . import inputs
from .models import AgentHealth, LogsResponse
from .rendering import json_body
from .routing import Param, Reply, Route

#: Lines of the console returned when ``lines`` is not given.
DEFAULT_LINES = 20


class VmApi:
    """:param fleet: the nodes of this daemon."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/vm/{hostname}/logs", self.logs, "The node's serial console", "vm",
                  {200: Reply("The last lines of the console", LogsResponse)},
                  query=(Param("lines", "Lines from the end (default 20; 0 for all)", kind="integer"),)),
            Route("GET", "/vm/{hostname}/health", self.health, "Health of the node's agent", "vm",
                  {200: Reply("The agent answered", AgentHealth),
                   503: Reply("The agent does not answer (HEAD: no body)")}, head=True),
        ]

    async def logs(self, request: IRequest, hostname: str) -> bytes:
        lines = inputs.query_int(request, "lines", DEFAULT_LINES, minimum=0)
        content, count = self._fleet.logs(hostname, lines)
        return json_body(request, LogsResponse(hostname=hostname, lines=count, content=content))

    async def health(self, request: IRequest, hostname: str) -> bytes:
        record = self._fleet.node(hostname)
        if request.method == b"HEAD":
            try:
                await self._fleet.health(hostname)
            except AgentNotConnected:
                request.setResponseCode(503)
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
                ip=record.ip,
            ),
        )
