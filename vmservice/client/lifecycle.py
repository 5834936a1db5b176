# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
A node's lifecycle: pause, resume, suspend, restore, relaunch, fork and shutdown.
"""

from __future__ import annotations

from typing import Any

from .requests import Requests, _path

__all__ = ["LifecycleCalls"]


class LifecycleCalls(Requests):
    """
    The lifecycle operations of one node.
    """

    async def pause(self, hostname: str) -> str:
        """Pause node ``hostname``'s VM (``POST /vm/{hostname}/pause``); answers the daemon's text reply."""
        return await self._text("POST", _path("vm", hostname, "pause"))

    async def resume(self, hostname: str) -> str:
        """Resume a paused node (``POST /vm/{hostname}/resume``); answers the daemon's text reply."""
        return await self._text("POST", _path("vm", hostname, "resume"))

    async def suspend(self, hostname: str) -> str:
        """
        Suspend node ``hostname`` (``POST /vm/{hostname}/suspend``) until
        :meth:`restore`; answers the daemon's text reply.
        """
        return await self._text("POST", _path("vm", hostname, "suspend"))

    async def restore(self, hostname: str, *, wait: str | None = None, timeout: str | None = None) -> str:
        """
        Restore a suspended node (``POST /vm/{hostname}/restore``).

        :param wait: ``"agent"`` to answer only once the guest agent answers.
        :param timeout: how long ``wait`` may take, as a Go duration (``"2m"``).
        :return: the daemon's text reply.
        """
        return await self._text("POST", _path("vm", hostname, "restore"), {"wait": wait, "timeout": timeout})

    async def relaunch(self, hostname: str, *, wait: str | None = None, timeout: str | None = None) -> dict[str, Any]:
        """
        Start node ``hostname``'s VM again (``POST /vm/{hostname}/relaunch``).

        :param wait: ``"agent"`` to answer only once the guest agent answers.
        :param timeout: how long ``wait`` may take, as a Go duration (``"2m"``).
        :return: the CreateNodeResponse (``hostname``, ``ip``, ...), as
            :meth:`create_node` answers it.
        """
        result: dict[str, Any] = await self._json(
            "POST", _path("vm", hostname, "relaunch"), {"wait": wait, "timeout": timeout}
        )
        return result

    async def fork(self, hostname: str, count: int = 1, *, tags: list[str] | None = None,
                   persistent: bool | None = None) -> list[dict[str, Any]]:
        """
        Fork the running node ``hostname`` into ``count`` new nodes that
        continue from its memory and disk (``POST /vm/{hostname}/fork``).

        :param tags: the children's tags.
        :param persistent: whether the children are persistent; ``None``: the parent's.
        :return: the children's CreateNodeResponses, in order.
        """
        body: dict[str, Any] = {"count": count, "tags": tags or []}
        if persistent is not None:
            body["persistent"] = persistent
        result: list[dict[str, Any]] = await self._json("POST", _path("vm", hostname, "fork"), None, body)
        return result

    async def shutdown(self, hostname: str, action: str = "shutdown") -> str:
        """
        Ask node ``hostname``'s guest to power off or restart
        (``POST /vm/{hostname}/shutdown``).

        :param action: ``"shutdown"`` or ``"reboot"``; always sent (the
            daemon's own default is ``reboot``).
        :return: the daemon's text reply.
        """
        return await self._text("POST", _path("vm", hostname, "shutdown"), {"action": action})
