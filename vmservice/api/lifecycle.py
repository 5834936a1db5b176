# -*- test-case-name: tests.api.test_lifecycle -*-
"""
Per-VM lifecycle routes: pause, resume, suspend, restore, relaunch, shutdown.

Thin: parse the query (or body), call the fleet, word its outcome as plain
text (relaunch: a CreateNodeResponse).  What each operation does in each
status is the fleet's table (``vmservice.nodes.transitions``,
``docs/lifecycle.md``).
"""

from __future__ import annotations

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.web.iweb import IRequest

from ..nodes.fleet import Fleet
from ..nodes.operation import Done
from ..nodes.transitions import Op
from .inputs.lifecycle import SHUTDOWN_ACTIONS, shutdown_action, timeout_param, wait_for, wait_param
from .models.meta import ErrorResponse
from .models.nodes import CreateNodeResponse
from .nodes import create_response, shielded
from .query import Choice, NoQuery, param
from .rendering import json_body, text_body
from .routing import Reply, Route

#: How each operation's outcome is said: (done now, nothing to do).
_WORDS = {
    Op.PAUSE: ("paused", "is already paused"),
    Op.RESUME: ("resumed", "is already running"),
    Op.SUSPEND: ("suspended", "is already suspended"),
    Op.RESTORE: ("restored", "restored"),
    Op.REBOOT: ("is rebooting", "is rebooting"),
    Op.SHUTDOWN: ("is shutting down", "is shutting down"),
}


def words(done: Done) -> str:
    """The plain-text answer of a lifecycle operation: ``demo-1 paused``."""
    changed, unchanged = _WORDS[done.operation]
    return f"{done.hostname} {changed if done.changed else unchanged}\n"


@frozen
class WaitQuery:
    """What restore and relaunch wait for."""

    wait: str | None = wait_param("Answer only once the agent answers again")
    timeout: float = timeout_param("408, the node stays up")


@frozen
class ShutdownQuery:
    """What a shutdown does."""

    action: str | None = param(
        Choice(SHUTDOWN_ACTIONS, code="invalid_action"),
        "shutdown or reboot (default reboot); also as a JSON body {\"action\": ...}",
    )


#: The refusal of a start that does not fit in the memory budget.
_NO_MEMORY = {503: Reply("insufficient_memory: the VM does not fit in the memory budget; tmpfs_full (fork_memory: file): "
                         "its memory file does not fit the tmpfs (the node is left as it was)",
                         ErrorResponse)}


#: The refusal of an operation whose snapshot or record finds no room in the state directory.
_NO_ROOM = {507: Reply("state_dir_full: the daemon's state directory has no room for the node's snapshot or record "
                       "(the node is left as it was)", ErrorResponse)}


def _text(summary: str) -> dict[int, Reply]:
    return {200: Reply(summary, media="text/plain")}


class LifecycleApi:
    """:param fleet: the nodes of this daemon."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        return [
            Route("POST", "/vm/{hostname}/pause", self.pause, "Pause the node's VM", "lifecycle",
                  _text("Paused (or already paused)")),
            Route("POST", "/vm/{hostname}/resume", self.resume, "Resume a paused VM", "lifecycle",
                  _text("Resumed (or already running)")),
            Route("POST", "/vm/{hostname}/suspend", self.suspend, "Save the VM's memory to disk and end it", "lifecycle",
                  {**_text("Suspended"), **_NO_ROOM}),
            Route("POST", "/vm/{hostname}/restore", self.restore, "Restore a suspended VM", "lifecycle",
                  {**_text("Restored"), **_NO_MEMORY, **_NO_ROOM}, query=WaitQuery),
            Route("POST", "/vm/{hostname}/relaunch", self.relaunch, "Boot a stopped node from its disk", "lifecycle",
                  {200: Reply("Relaunched", CreateNodeResponse), **_NO_MEMORY, **_NO_ROOM}, query=WaitQuery),
            Route("POST", "/vm/{hostname}/shutdown", self.shutdown, "Power the VM off or reboot it", "lifecycle",
                  _text("Initiated"), query=ShutdownQuery),
        ]

    # Every operation is shielded: a client that goes away must not cut one
    # in half (the VM paused but the record saying Running, say).

    async def pause(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        done = await shielded(Deferred.fromCoroutine(self._fleet.lifecycle.pause(hostname)))
        return text_body(request, words(done))

    async def resume(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        done = await shielded(Deferred.fromCoroutine(self._fleet.lifecycle.resume(hostname)))
        return text_body(request, words(done))

    async def suspend(self, request: IRequest, query: NoQuery, hostname: str) -> bytes:
        done = await shielded(Deferred.fromCoroutine(self._fleet.snapshots.suspend(hostname)))
        return text_body(request, words(done))

    async def restore(self, request: IRequest, query: WaitQuery, hostname: str) -> bytes:
        wait = wait_for(query.wait)
        done = await shielded(Deferred.fromCoroutine(self._fleet.snapshots.restore(hostname, wait, query.timeout)))
        return text_body(request, words(done))

    async def relaunch(self, request: IRequest, query: WaitQuery, hostname: str) -> bytes:
        wait = wait_for(query.wait)
        record = await shielded(Deferred.fromCoroutine(self._fleet.lifecycle.relaunch(hostname, wait, query.timeout)))
        return json_body(request, create_response(record))

    async def shutdown(self, request: IRequest, query: ShutdownQuery, hostname: str) -> bytes:
        op = shutdown_action(request, query.action)
        done = await shielded(Deferred.fromCoroutine(self._fleet.lifecycle.shutdown(hostname, op)))
        return text_body(request, words(done))
