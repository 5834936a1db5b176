# -*- test-case-name: tests.nodes.test_readiness -*-
"""
Waiting for a node's guest: ``wait=agent``, health within a bounded time,
and setting the clock of a guest that stood still.

Each wait is a race (:func:`twisted.internet.defer.race`) between what is
waited for, the end of the VM and a timer; the losers are cancelled, so no
waiter, timer or health request is left behind.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import CancelledError, Deferred, race
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import AgentNotConnected
from ..guestport.guest import AgentHealth, IGuest, IGuestConnection
from ..hypervisors.base import IMachine, MachineExit, describe_exit

log = Logger()

#: Seconds a request for a node's guest (exec, cp, fs, shell, tunnel,
#: background execs) waits for its agent to connect when it is not connected
#: yet: a node still booting, or one whose agent is reconnecting after a
#: daemon restart.  It is answered 503 ``agent_unavailable`` after that.
AGENT_WAIT = 10.0

#: Seconds a health request may take before it is answered 503: health must
#: answer in bounded time whatever the agent does (rebooting, stuck).
HEALTH_LIMIT = 2.0


class NotReady(Exception):
    """The guest did not become ready: the wait ran out of time, or its VM ended (:attr:`ended`)."""

    def __init__(self, message: str, ended: MachineExit | None = None) -> None:
        super().__init__(message)
        self.ended = ended


def _settled(d: "Deferred[Any]") -> "Deferred[tuple[bool, Any]]":
    """``d``'s outcome as a success either way: ``(True, result)`` or ``(False, failure)``."""
    return d.addCallbacks(lambda value: (True, value), lambda failure: (False, failure))


async def first_of(*ds: "Deferred[Any]") -> tuple[int, Any]:
    """
    The index and result of the first of ``ds`` to fire, success or failure
    (a failure is raised); the others are cancelled.
    """
    index, (ok, value) = await race([_settled(d) for d in ds])
    if not ok:
        assert isinstance(value, Failure)
        value.raiseException()
    return index, value


async def answered(agent: IGuestConnection) -> AgentHealth:
    """The agent's first health reply, across agent restarts between its hello and its reply."""
    while True:
        await agent.when_ready()
        try:
            return await agent.health()
        except CancelledError:
            raise
        except Exception:
            # The connection dropped between hello and reply (the guest
            # restarted its agent): wait for the next hello.
            continue


async def wait_for_agent(clock: IReactorTime, machine: IMachine, agent: IGuestConnection, timeout: float) -> None:
    """
    Wait until the agent of ``machine``'s guest answers.

    :raise NotReady: ``timeout`` seconds passed, or the VM ended first.
    """
    await wait_for_guest(clock, machine, Deferred.fromCoroutine(answered(agent)), timeout)


async def wait_for_guest(clock: IReactorTime, machine: IMachine, ready: "Deferred[Any]", timeout: float) -> Any:
    """
    Wait until ``ready`` fires (something the guest does: its agent answers,
    its userdata is over); its result, or its failure raised.

    :raise NotReady: ``timeout`` seconds passed, or the VM ended first
        (``ready`` is cancelled then).
    """
    index, value = await first_of(ready, machine.ended, deferLater(clock, timeout, lambda: None))
    if index == 1:
        raise NotReady(describe_exit(value), ended=value)
    if index == 2:
        raise NotReady(f"no answer within {timeout:g} s")
    return value


async def settled_within(clock: IReactorTime, settled: Deferred[None], seconds: float) -> float:
    """
    Wait until a node has started (its creation, or the start-up recovery's
    adoption of its VM, is done: ``settled`` fires), for at most ``seconds``;
    return the seconds left of them either way (the caller looks again).
    """
    begun = clock.seconds()
    await race([settled, deferLater(clock, seconds, lambda: None)])
    return max(0.0, seconds - (clock.seconds() - begun))


async def connected_within(clock: IReactorTime, machine: IMachine, agent: IGuestConnection, seconds: float) -> None:
    """
    Wait until ``agent`` is connected, for at most ``seconds`` and no longer
    than ``machine`` runs; return either way (the caller looks again).
    """
    try:
        await wait_for_guest(clock, machine, agent.when_ready(), seconds)
    except NotReady:
        pass


async def bounded_health(clock: IReactorTime, hostname: str, agent: IGuest) -> AgentHealth:
    """
    The health of a node's agent, in at most :data:`HEALTH_LIMIT` seconds.

    :raise AgentNotConnected: it is not connected, failed, or did not answer in time.
    """
    try:
        index, value = await first_of(
            Deferred.fromCoroutine(agent.health()), deferLater(clock, HEALTH_LIMIT, lambda: None)
        )
    except CancelledError:
        raise
    except Exception as error:
        raise AgentNotConnected(f"the agent of {hostname!r} does not answer: {error}") from error
    if index == 1:
        raise AgentNotConnected(f"the agent of {hostname!r} did not answer within {HEALTH_LIMIT:g} s")
    health: AgentHealth = value
    return health


def sync_clock(hostname: str, agent: IGuestConnection, wall_clock: Callable[[], int]) -> None:
    """Set the guest's clock once its agent answers (it stood still while paused or suspended)."""

    async def sync() -> None:
        await agent.when_ready()
        await agent.set_clock(wall_clock())

    Deferred.fromCoroutine(sync()).addErrback(
        lambda failure: log.info("could not set the clock of {hostname}: {error}", hostname=hostname, error=failure.value)
    )


__all__ = ["AGENT_WAIT", "HEALTH_LIMIT", "NotReady", "answered", "bounded_health", "connected_within", "first_of", "sync_clock", "wait_for_agent", "wait_for_guest"]
