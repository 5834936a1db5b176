# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.test_console -*-
"""
The nodes' consoles, read: a tail of lines or the whole log as a stream,
always off the reactor and never more than ``console_log_size`` bytes
(:mod:`.console` reads the file; :mod:`.console_rotation` keeps it bounded).
"""

from __future__ import annotations

from . import console
from .blocking import Blocking
from .registry import Registry


class Consoles:
    """
    :param registry: the daemon's nodes.
    :param limit: ``console_log_size``: the most bytes of a console kept and read.
    :param blocking: runs a blocking call (a file read) off the reactor.
    """

    def __init__(self, registry: Registry, limit: int, blocking: Blocking) -> None:
        self._registry = registry
        self._limit = limit
        self._blocking = blocking

    async def tail(self, hostname: str, lines: int) -> tuple[str, int]:
        """
        The last ``lines`` lines of node ``hostname``'s console (all of it for 0).

        :return: the text and the number of lines in it.
        :raise NotFound: no such node.
        """
        path = self._registry.find(hostname).paths.console
        return await self._blocking(lambda: console.tail(path, lines, self._limit))

    def stream(self, hostname: str) -> console.ConsoleStream:
        """
        Node ``hostname``'s whole console, to be read piece by piece; the caller closes it.

        :raise NotFound: no such node.
        """
        path = self._registry.find(hostname).paths.console
        return console.ConsoleStream(console.ConsoleText(path, self._limit), self._blocking)

    def paths(self) -> list[str]:
        """The console logs of every node, which the daemon keeps bounded (:mod:`.console_rotation`)."""
        return [node.paths.console for node in self._registry.all()]


__all__ = ["Consoles"]
