# -*- test-case-name: tests.nodes.test_lifecycle -*-
"""
What the node layer does when the daemon stops: a hypervisor probe under way
is stopped, every VM this daemon runs ends (powered off within the group's
grace when it is ``graceful_shutdown``, a paused one resumed first so that it
hears the power button; else killed), ephemeral nodes go and persistent ones
are kept Stopped; then the network objects, the fork memory directory and the
templates are closed.
"""

from __future__ import annotations

from typing import Callable

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from ..hypervisors.base import IMachine, MachineExit
from .model import Status
from .registry import Registry
from .runtime import NodeRuntime
from .runtime_parts import RuntimeParts
from .warm_port import WarmStart

log = Logger("vmservice.nodes.fleet")


async def stop_all(registry: Registry, parts: RuntimeParts, warm: WarmStart, stop_grace: float) -> None:
    """
    Stop every node's VM and close what the nodes share.

    :param parts: what the nodes are made with (driver, records, networks).
    :param warm: warm start, whose memory directory and templates are closed last.
    :param stop_grace: seconds a graceful stop waits before it kills.
    """
    # A KVM probe under way is stopped with the daemon (its QEMU killed and reaped).
    await parts.driver.stop()
    running = [node for node in registry.all() if node.machine is not None]
    if running:
        log.info("stopping {count} node(s)", count=len(running))
        stops = [Deferred.fromCoroutine(_stop(registry, parts, node, stop_grace)) for node in running]
        await DeferredList(stops, consumeErrors=True)
    await parts.addressing.close()
    warm.close()


async def _stop(registry: Registry, parts: RuntimeParts, node: NodeRuntime, stop_grace: float) -> None:
    """Stop a node's VM for the daemon's stop: ephemeral nodes go, persistent ones are kept Stopped."""
    group = parts.config.group(node.record.hostgroup)
    graceful = group.graceful_shutdown if group is not None else False
    paused = node.record.status == Status.PAUSED
    node.phase.abandon()
    await node.release(_ending(stop_grace, graceful, paused))
    if node.record.persistent:
        parts.store.save(node.record.with_status(Status.STOPPED))
    else:
        parts.store.remove(node.hostname)
    registry.drop(node)


def _ending(grace: float, graceful: bool, paused: bool) -> Callable[[IMachine], Deferred[MachineExit]]:
    """How a VM ends when the daemon stops: powered off within ``grace`` (a paused one resumed first), or killed."""

    async def end(machine: IMachine) -> MachineExit:
        if graceful and paused:
            try:
                await machine.resume()  # a frozen guest cannot hear the power button
            except Exception:
                pass
        return await machine.stop(graceful, grace)

    return lambda machine: Deferred.fromCoroutine(end(machine))


__all__ = ["stop_all"]
