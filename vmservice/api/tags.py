# -*- test-case-name: tests.api.test_tags -*-
"""
A node's tags after create: ``GET`` and ``PATCH /vm/{hostname}/tags``.

A change answers once it is written (it survives a crash right after the
answer) and the listings' tag filters see it at once; the rules of an edit
are :mod:`vmservice.nodes.tagging`'s, the body's :func:`.inputs.tags.tag_edit`'s.
"""

from __future__ import annotations

from twisted.web.iweb import IRequest

from ..nodes.fleet import Fleet
from .inputs.tags import tag_edit
from .models.meta import ErrorResponse
from .models.nodes import NodeTags, TagsUpdate
from .query import NoQuery
from .rendering import json_body
from .routing import Reply, Route


class TagsApi:
    """:param fleet: the nodes of this daemon."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/vm/{hostname}/tags", self.tags, "The node's tags", "vm",
                  {200: Reply("The tags, in their order", NodeTags)}),
            Route("PATCH", "/vm/{hostname}/tags", self.edit, "Change the node's tags", "vm",
                  {200: Reply("The tags from now on (also when nothing changed)", NodeTags),
                   400: Reply("A bad body or tag, or more than 64 tags (too_many_tags)", ErrorResponse),
                   409: Reply("The node is being removed (busy)", ErrorResponse)},
                  body=TagsUpdate),
        ]

    async def tags(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        tags = self._fleet.tagging.tags(hostname)
        return json_body(request, NodeTags(hostname=hostname, tags=list(tags)))

    async def edit(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        edit = tag_edit(request)
        tags = self._fleet.tagging.edit(hostname, edit)
        return json_body(request, NodeTags(hostname=hostname, tags=list(tags)))
