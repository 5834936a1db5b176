# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
The daemon itself: its version (``GET /info``) and the images it has built (``GET /images``).
"""

from __future__ import annotations

from typing import Any

from .requests import Requests, _path

__all__ = ["MetaCalls"]


class MetaCalls(Requests):
    """
    What the daemon says of itself.
    """

    async def info(self) -> dict[str, Any]:
        """The daemon's version and platform (``GET /info``)."""
        result: dict[str, Any] = await self._json("GET", _path("info"))
        return result

    # -- images ----------------------------------------------------------

    async def images(self) -> list[dict[str, Any]]:
        """The guest images built on the daemon's host (``GET /images``)."""
        result: list[dict[str, Any]] = await self._json("GET", _path("images"))
        return result
