# -*- test-case-name: tests.nodes.test_lifecycle -*-
"""
Host groups with ``count: N``: N protected, persistent nodes kept running.

At start (after the recovery) each such group is brought to N: stopped
members are relaunched, suspended ones restored (relaunched from their disk
when the restore fails), and missing ones created.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Coroutine

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from ..config import Config
from .model import CreateRequest, NodeRecord, Status, Wait
from .registry import Registry

log = Logger()

#: The operations :func:`keep_counts` needs: create, relaunch and restore.
Create = Callable[[str, CreateRequest, Wait, float], Awaitable[NodeRecord]]
Relaunch = Callable[[str, Wait, float], Awaitable[object]]
Restore = Callable[[str, Wait, float], Awaitable[object]]


async def _restore_or_relaunch(hostname: str, restore: Restore, relaunch: Relaunch) -> None:
    """Bring a suspended member back: from its snapshot, or from its disk when that fails."""
    try:
        await restore(hostname, Wait.NONE, 0)
    except Exception as error:
        log.info("restoring {hostname} failed ({error}); relaunching it from its disk", hostname=hostname, error=error)
        await relaunch(hostname, Wait.NONE, 0)


async def keep_counts(config: Config, registry: Registry, create: Create, relaunch: Relaunch, restore: Restore) -> None:
    """Bring every host group with ``count: N`` to N running protected nodes."""
    work: list[Coroutine[Any, Any, Any]] = []
    for group in config.host_groups:
        if group.count <= 0:
            continue
        members = [
            node.record for node in registry.all()
            if node.record.hostgroup == group.name and node.record.protected and node.record.persistent
            and node.record.status not in (Status.CREATING, Status.DELETING)
        ]
        for record in members:
            if record.status == Status.STOPPED:
                work.append(_awaited(relaunch(record.hostname, Wait.NONE, 0)))
            elif record.status == Status.SUSPENDED:
                work.append(_restore_or_relaunch(record.hostname, restore, relaunch))
        for _ in range(group.count - len(members)):
            work.append(_awaited(create(group.name, CreateRequest(persistent=True, protected=True), Wait.NONE, 0)))
    results = await DeferredList([Deferred.fromCoroutine(each) for each in work], consumeErrors=True)
    for ok, result in results:
        if not ok:
            log.failure("keeping a host group's count failed", result)


async def _awaited(action: Awaitable[object]) -> None:
    await action


__all__ = ["keep_counts"]
