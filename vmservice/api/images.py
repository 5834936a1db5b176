# -*- test-case-name: tests.api.test_images -*-
"""
The guest images route: ``GET /images`` lists the images built on this host
(read-only; images are built with ``vmctl image build``).
"""

from __future__ import annotations

from twisted.web.iweb import IRequest

from ..images.store import ImageInfo
from ..nodes.fleet import Fleet
from .models.meta import ImageSummary
from .query import NoQuery
from .rendering import json_body
from .routing import Reply, Route


def image_summary(info: ImageInfo) -> ImageSummary:
    """The listing entry of a built image."""
    return ImageSummary(name=info.name, size=info.size, created=info.created, source=info.source,
                        recipe_hash=info.recipe_hash, ssh_server=info.ssh_server)


class ImagesApi:
    """
    :param fleet: knows where images are.
    """

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/images", self.list_images, "List the built guest images", "images",
                  {200: Reply("The images a node can be made from (disk_image), by name", ImageSummary, array=True)}),
        ]

    async def list_images(self, request: IRequest, query: NoQuery) -> bytes:
        return json_body(request, [image_summary(info) for info in await self._fleet.images()])


__all__ = ["ImagesApi", "image_summary"]
