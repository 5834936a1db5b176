# -*- test-case-name: tests.agent.test_client -*-
"""
What the operations of :mod:`.execution`, :mod:`.copying` and
:mod:`.filesystem` need of an agent: a way to open streams and make
one-shot requests (:class:`~.guest.AgentGuest` and its subclasses have it).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from twisted.internet.interfaces import IProtocol

from .stream import AgentStream


class Channel(Protocol):
    """An agent channel."""

    def open_stream(self, header: Mapping[str, Any], protocol: IProtocol) -> AgentStream:
        """Open a stream for ``header`` served by ``protocol`` (its transport is the stream)."""

    async def request(self, header: Mapping[str, Any], limit: int, body: bytes = b"") -> bytes:
        """Send ``header`` and ``body``; return what the agent answers (at most ``limit`` bytes)."""


__all__ = ["Channel"]
