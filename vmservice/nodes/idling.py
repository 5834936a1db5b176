# -*- test-case-name: tests.nodes.test_idle -*-
"""
The idle machines of a fleet's nodes (:mod:`.idle`), and what they act
with: the automatic suspend and the wake of :class:`.snapshots.Snapshots`,
timed for ``/metrics``.

The fleet tells :class:`IdleNodes` of every node it registers and forgets;
the API holds a node while it serves a request naming it (:meth:`IdleNodes.hold`);
:meth:`vmservice.nodes.fleet.Fleet.guest` asks :meth:`IdleNodes.ready` before
it hands out a guest, which wakes the node when its record says the idle
timer suspended it.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ..errors import Conflict, NotFound
from .idle import IdleCore, IdleNode, idle_node
from .model import NodeRecord

log = Logger()

#: Seconds a wake waits for the restored guest's agent to answer.
WAKE_TIMEOUT = 30.0

#: Most times a request looks at a node again while suspends and wakes run.
_MOST_TURNS = 4

#: What ``on_idle`` is called with: an automatic suspend or a wake that
#: succeeded (with its duration), or failed (duration 0).
SUSPEND, WAKE, SUSPEND_FAILED, WAKE_FAILED = "suspend", "wake", "suspend_failed", "wake_failed"


def _nothing() -> None:
    """Releases no hold."""


class IdleNodes:
    """
    The idle machines of the nodes of one fleet.

    :param clock: runs the timers and times suspends and wakes.
    :param timeout_of: a host group's ``idle_suspend`` (``None``: off, or
        no such group).
    :param suspend: the automatic suspend of a node (by hostname): fires
        with whether it now sleeps (``Snapshots.suspend(automatic=True)``).
    :param wake: the wake of a node within a timeout: fires with whether
        it was woken (``Snapshots.wake``).
    :param observe: called with ``(group, what, seconds)`` for each
        automatic suspend and wake (``what``: :data:`SUSPEND`, :data:`WAKE`,
        :data:`SUSPEND_FAILED`, :data:`WAKE_FAILED`).
    """

    def __init__(
        self,
        clock: IReactorTime,
        timeout_of: Callable[[str], float | None],
        suspend: Callable[[str], Awaitable[bool]],
        wake: Callable[[str, float], Awaitable[bool]],
        observe: Callable[[str, str, float], None],
    ) -> None:
        self._clock = clock
        self._timeout_of = timeout_of
        self._suspend = suspend
        self._wake = wake
        self._observe = observe
        self._nodes: dict[str, IdleNode] = {}
        self._new: dict[str, Callable[[], None]] = {}

    def track(self, record: NodeRecord, new: bool = False) -> None:
        """
        Give the node of ``record`` a new idle machine (Asleep when its
        record says so), replacing any.

        :param new: the node is being created (or forked): it is held until
            :meth:`made` says it is, so that its timer starts only once its
            create has answered (a boot may take longer than the idle time).
        """
        self.forget(record.hostname)
        hostname, group = record.hostname, record.hostgroup
        core = IdleCore(
            hostname, self._clock, self._timeout_of(group),
            lambda: Deferred.fromCoroutine(self._suspended(hostname, group)),
            lambda: Deferred.fromCoroutine(self._woken(hostname, group)),
        )
        self._nodes[hostname] = idle_node(core, asleep=record.idle_suspended)
        if new:
            self._new[hostname] = self.hold(hostname)

    def made(self, hostname: str) -> None:
        """The create (or fork) of node ``hostname`` answered: its timer starts."""
        self._new.pop(hostname, _nothing)()

    def forget(self, hostname: str) -> None:
        """The node is gone: its timer stops."""
        self._new.pop(hostname, None)
        machine = self._nodes.pop(hostname, None)
        if machine is not None:
            machine.forget()

    def stop(self) -> None:
        """The daemon stops: every timer stops."""
        for hostname in list(self._nodes):
            self.forget(hostname)

    def hold(self, hostname: str) -> Callable[[], None]:
        """
        A request naming node ``hostname`` is being served: its idle timer
        stands still until the returned function is called (once; more calls
        do nothing).  A node that does not exist is not held.
        """
        machine = self._nodes.get(hostname)
        if machine is None:
            return _nothing
        machine.hold()
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                machine.release()

        return release

    async def ready(self, hostname: str, record_of: Callable[[], NodeRecord]) -> None:
        """
        A request needs the guest of node ``hostname``, whose record
        ``record_of`` gives: wake it first when the idle timer suspended it
        (or is suspending it); otherwise its timer starts over.

        :raise NotFound: the node is gone (from ``record_of``).
        :raise ServiceError: the wake failed: what it failed with (e.g.
            ``restore_failed``, 503 ``insufficient_memory`` from the memory budget, 503
            ``agent_unavailable`` when the woken agent does not answer).
        """
        # Each turn waits for the machine to move (a suspend or a wake over).
        for _ in range(_MOST_TURNS):
            machine = self._nodes.get(hostname)
            if machine is None:
                return
            if record_of().idle_suspended:
                await machine.wake()
                if not record_of().idle_suspended:
                    return
            else:
                await machine.active()
                if not record_of().idle_suspended:
                    return

    async def _suspended(self, hostname: str, group: str) -> bool:
        began = self._clock.seconds()
        try:
            slept = await self._suspend(hostname)
        except (Conflict, NotFound) as error:
            # Busy with another operation, or gone meanwhile: nothing failed.
            log.info("node {hostname} stays awake: {error}", hostname=hostname, error=error)
            return False
        except Exception:
            self._observe(group, SUSPEND_FAILED, 0.0)
            raise
        if slept:
            self._observe(group, SUSPEND, self._clock.seconds() - began)
        return slept

    async def _woken(self, hostname: str, group: str) -> None:
        began = self._clock.seconds()
        try:
            woken = await self._wake(hostname, WAKE_TIMEOUT)
        except Exception:
            self._observe(group, WAKE_FAILED, 0.0)
            raise
        if woken:
            self._observe(group, WAKE, self._clock.seconds() - began)


__all__ = ["IdleNodes", "SUSPEND", "SUSPEND_FAILED", "WAKE", "WAKE_FAILED", "WAKE_TIMEOUT"]
