# -*- test-case-name: tests.api.test_forking -*-
"""
The fork route: ``POST /vm/{hostname}/fork`` makes new nodes that continue
from a running node's memory and disk (see ``docs/warm-start.md``).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.web.iweb import IRequest

from ..nodes.fleet import Fleet
from .inputs.forks import fork_request
from .models.meta import ErrorResponse
from .models.nodes import CreateNodeResponse, ForkNodeRequest
from .nodes import create_response, shielded
from .query import NoQuery
from .rendering import json_body
from .routing import Reply, Route


class ForkApi:
    """:param fleet: the nodes of this daemon."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        return [
            Route("POST", "/vm/{hostname}/fork", self.fork,
                  "Fork a running node into new nodes that continue from its memory and disk", "lifecycle",
                  {201: Reply("The new nodes", CreateNodeResponse, array=True),
                   409: Reply("max_nodes_reached: the children would take the group past its max_nodes; paused, "
                              "not_running, busy, not_forkable", ErrorResponse),
                   503: Reply("insufficient_memory: the children do not fit in the memory budget; tmpfs_full (fork_memory: "
                              "file): no room for the copy of the parent's memory (nothing was made)",
                              ErrorResponse),
                   507: Reply("state_dir_full: the daemon's state directory has no room for the fork (every child "
                              "made was removed; the parent runs on)", ErrorResponse)}, body=ForkNodeRequest),
        ]

    async def fork(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        wanted = fork_request(request)
        # Shielded: a client that goes away must not leave the parent paused or children half made.
        forked = await shielded(Deferred.fromCoroutine(self._fleet.fork(hostname, wanted)))
        return json_body(request, [create_response(child) for child in forked.children], 201)


__all__ = ["ForkApi"]
