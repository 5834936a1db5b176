# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.test_recovery -*-
"""
The one place requests reach a guest: a running node's agent handed out
(:meth:`GuestAccess.guest`), after waiting for what may still come (its
wake from an idle suspend, its start or adoption, its agent's connection),
and its health asked within a bounded time.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from attrs import evolve
from twisted.internet.interfaces import IReactorTime

from ..errors import AgentNotConnected
from ..guestport.guest import AgentHealth, IGuest
from .readiness import AGENT_WAIT, bounded_health, connected_within, settled_within
from .registry import Registry
from .transitions import Op, check


class GuestAccess:
    """
    The guests of a fleet's nodes.

    :param registry: the nodes.
    :param clock: bounds the waits.
    :param awake: wakes a node the idle timer suspended (raises
        :class:`~vmservice.errors.NotFound` when there is none).
    """

    def __init__(self, registry: Registry, clock: IReactorTime, awake: Callable[[str], Awaitable[None]]) -> None:
        self._registry = registry
        self._clock = clock
        self._awake = awake

    async def guest(self, hostname: str, wait: float = AGENT_WAIT) -> IGuest:
        """
        The guest of a running node, for operations inside it (exec, cp, fs),
        woken first when the idle timer suspended it (:mod:`.idle`), its agent
        waited for up to ``wait`` seconds in all (booting, not adopted yet by
        the start-up recovery, or reconnecting after a daemon restart).

        :raise NotFound: no such node (or it went away meanwhile).
        :raise Conflict: paused (the contract's 409 for exec, cp, fs and
            shell), stopped or suspended, or busy.
        :raise AgentNotConnected: it runs but its agent is not connected in time.
        :raise ServiceError: it slept and its wake failed (:meth:`.idling.IdleNodes.ready`).
        """
        await self._awake(hostname)
        node = self._registry.find(hostname)
        if not node.has_started and wait > 0:  # being created, or not adopted yet by the start-up recovery
            return await self.guest(hostname, await settled_within(self._clock, node.settled(), wait))
        check(Op.AGENT, hostname, node.record.status)
        await node.room.check()
        agent = node.agent
        if agent is not None and not agent.connected and node.machine is not None and wait > 0:
            await connected_within(self._clock, node.machine, agent, wait)
            return await self.guest(hostname, wait=0)  # looked at again: gone, paused or stopped by now?
        if agent is None or not agent.connected:
            raise AgentNotConnected(f"the agent of node {hostname!r} is not connected (yet)", code="agent_unavailable")
        return agent

    async def health(self, hostname: str) -> AgentHealth:
        """
        Ask the node's agent for its health, within a bounded time.

        :raise Conflict: the node is in a state without an agent: paused,
            stopped, suspended, or busy with an operation that ends its VM.
        :raise AgentNotConnected: it should answer but does not (in time).
        """
        health = await bounded_health(self._clock, hostname, await self.guest(hostname, wait=0))
        if not self._registry.find(hostname).record.userdata:  # nothing to run: over once the agent answers
            health = evolve(health, userdata_ran=True)
        return health


__all__ = ["GuestAccess"]
