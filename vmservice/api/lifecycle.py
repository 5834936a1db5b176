# -*- test-case-name: tests.api.test_lifecycle -*-
"""
Per-VM lifecycle routes: pause, resume, suspend, restore, relaunch, shutdown.

Thin: parse the query (or body), call the fleet, answer plain text (relaunch:
a CreateNodeResponse).  What each operation does in each status is the
fleet's table (``vmservice.nodes.transitions``, ``docs/lifecycle.md``).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.web.iweb import IRequest

from ..nodes.fleet import Fleet
from . import inputs
from .models import CreateNodeResponse
from .nodes import create_response, shielded
from .rendering import json_body, text_body
from .routing import Param, Reply, Route

_WAIT = (
    Param("wait", "Answer only once the agent answers again", enum=("agent",)),
    Param("timeout", "How long to wait (Go duration, default 5m); past it 408, the node stays up"),
)


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
                  _text("Suspended")),
            Route("POST", "/vm/{hostname}/restore", self.restore, "Restore a suspended VM", "lifecycle",
                  _text("Restored"), query=_WAIT),
            Route("POST", "/vm/{hostname}/relaunch", self.relaunch, "Boot a stopped node from its disk", "lifecycle",
                  {200: Reply("Relaunched", CreateNodeResponse)}, query=_WAIT),
            Route("POST", "/vm/{hostname}/shutdown", self.shutdown, "Power the VM off or reboot it", "lifecycle",
                  _text("Initiated"),
                  query=(Param("action", "shutdown or reboot (default reboot); also as a JSON body {\"action\": ...}",
                               enum=inputs.SHUTDOWN_ACTIONS),)),
        ]

    # Every operation is shielded: a client that goes away must not cut one
    # in half (the VM paused but the record saying Running, say).

    async def pause(self, request: IRequest, hostname: str) -> bytes:
        done = await shielded(Deferred.fromCoroutine(self._fleet.pause(hostname)))
        return text_body(request, done + "\n")

    async def resume(self, request: IRequest, hostname: str) -> bytes:
        done = await shielded(Deferred.fromCoroutine(self._fleet.resume(hostname)))
        return text_body(request, done + "\n")

    async def suspend(self, request: IRequest, hostname: str) -> bytes:
        done = await shielded(Deferred.fromCoroutine(self._fleet.suspend(hostname)))
        return text_body(request, done + "\n")

    async def restore(self, request: IRequest, hostname: str) -> bytes:
        wait, timeout = inputs.wait_params(request)
        done = await shielded(Deferred.fromCoroutine(self._fleet.restore(hostname, wait, timeout)))
        return text_body(request, done + "\n")

    async def relaunch(self, request: IRequest, hostname: str) -> bytes:
        wait, timeout = inputs.wait_params(request)
        record = await shielded(Deferred.fromCoroutine(self._fleet.relaunch(hostname, wait, timeout)))
        return json_body(request, create_response(record))

    async def shutdown(self, request: IRequest, hostname: str) -> bytes:
        action = inputs.shutdown_action(request)
        done = await shielded(Deferred.fromCoroutine(self._fleet.shutdown(hostname, action)))
        return text_body(request, done + "\n")
