# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
Host groups and nodes: listings, statistics, create and delete, and
one node's description, tags, console and health.
"""

from __future__ import annotations

from typing import Any, Sequence

from .requests import Requests, _path

__all__ = ["NodeCalls"]


class NodeCalls(Requests):
    """
    Host groups and nodes, and what the daemon tells of one node.
    """

    # -- host groups and nodes -------------------------------------------

    async def hostgroups(self) -> list[dict[str, Any]]:
        """Every host group with its limits (``GET /hostgroup``)."""
        result: list[dict[str, Any]] = await self._json("GET", _path("hostgroup"))
        return result

    async def nodes(
        self, group: str | None = None, *, tag: str | None = None, tag_prefix: str | None = None
    ) -> list[dict[str, Any]]:
        """
        The nodes of the daemon, or of one host group, optionally only those
        with an exact ``tag`` or a tag starting with ``tag_prefix``.
        """
        path = _path("hostgroup", group, "nodes") if group is not None else _path("nodes")
        result: list[dict[str, Any]] = await self._json("GET", path, {"tag": tag, "tag_prefix": tag_prefix})
        return result

    async def stats(self) -> list[dict[str, Any]]:
        """
        Every node with its guest's statistics ``snapshot``, or an ``error`` saying why there is none
        (``GET /nodes/stats``).
        """
        result: list[dict[str, Any]] = await self._json("GET", _path("nodes", "stats"))
        return result

    async def node_stats(self, hostname: str) -> dict[str, Any]:
        """One node with its ``snapshot`` or ``error`` (``GET /node/{hostname}/stats``)."""
        result: dict[str, Any] = await self._json("GET", _path("node", hostname, "stats"))
        return result

    async def create_node(
        self, group: str, body: dict[str, Any] | None = None, *, wait: str | None = None, timeout: str | None = None
    ) -> dict[str, Any]:
        """
        Create a node in ``group``.

        :param body: a CreateNodeRequest (``{"tags": [...], "cpus": 1,
            "userdata": "...", "secrets": [...], "ssh_keys": [...]}``); ``None``
            for the group's defaults.
        :param wait: ``"agent"`` to answer only once the guest agent is up
            (and the node's secrets and login are in place); ``"userdata"``
            once its userdata is over too.
        :param timeout: how long ``wait`` may take, as a Go duration
            (``"2m"``); past it the daemon removes the node and answers 408.
        :return: the CreateNodeResponse (``hostname``, ``ip``, ...).
        """
        result: dict[str, Any] = await self._json(
            "POST", _path("hostgroup", group, "nodes"), {"wait": wait, "timeout": timeout}, body or {}
        )
        return result

    async def delete_node(self, group: str, hostname: str) -> dict[str, Any]:
        """Delete node ``hostname`` of ``group``; answers the DeleteResponse."""
        result: dict[str, Any] = await self._json("DELETE", _path("hostgroup", group, "nodes", hostname))
        return result

    # -- one node --------------------------------------------------------

    async def describe(self, hostname: str) -> dict[str, Any]:
        """
        Everything the daemon tells of node ``hostname`` (``GET
        /vm/{hostname}``): the Node fields, ``storage``, ``image``,
        ``network``, ``disk``, ``snapshot``, ``agent_connected``, ``pid`` ...
        """
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname))
        return result

    async def tags(self, hostname: str) -> list[str]:
        """The tags of node ``hostname``, in their order (``GET /vm/{hostname}/tags``)."""
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "tags"))
        tags: list[str] = result["tags"]
        return tags

    async def set_tags(
        self,
        hostname: str,
        *,
        add: Sequence[str] | None = None,
        remove: Sequence[str] | None = None,
        replace: Sequence[str] | None = None,
    ) -> list[str]:
        """
        Change the tags of node ``hostname`` in one atomic step (``PATCH
        /vm/{hostname}/tags``): ``replace`` them all (``[]`` clears them), or
        ``remove`` some and ``add`` others (appended unless there already).
        Only the arguments given are sent; the daemon refuses ``replace``
        with another, and a call with none.

        :return: the node's tags from now on.
        """
        body = {name: list(value) for name, value in (("add", add), ("remove", remove), ("replace", replace))
                if value is not None}
        result: dict[str, Any] = await self._json("PATCH", _path("vm", hostname, "tags"), json=body)
        tags: list[str] = result["tags"]
        return tags

    async def logs(self, hostname: str, lines: int | None = None) -> dict[str, Any]:
        """
        The tail of the node's serial console: the last ``lines`` lines (the
        daemon's default when ``None``; ``0`` for all of it).
        """
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "logs"), {"lines": lines})
        return result

    async def health(self, hostname: str) -> dict[str, Any]:
        """
        The guest agent's health (uptimes in nanoseconds).

        :raise ApiError: status 503 when the agent does not answer.
        """
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "health"))
        return result

    async def healthy(self, hostname: str) -> bool:
        """
        Whether the node's agent answers, asked with ``HEAD`` (no body):
        ``True`` on 200, ``False`` on 503 (it should but does not) and 409 (the
        node is paused, stopped or suspended: no agent can answer).

        :raise ApiError: any other status, e.g. 404 for an unknown node.
        """
        response, _ = await self._request("HEAD", _path("vm", hostname, "health"), ok=(409, 503))
        code: int = response.code
        return code == 200
