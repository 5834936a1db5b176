# -*- test-case-name: tests.client.test_secrets,tests.integration.test_client -*-
"""
The daemon's secrets (``/secrets``): metadata listed, content only sent.
"""

from __future__ import annotations

import base64
from typing import Any

from .requests import Requests, _octal, _path

__all__ = ["MAX_SECRET_SIZE", "SecretCalls"]

#: The most bytes a secret may hold (the daemon refuses more, 400): read no further than this and one.
MAX_SECRET_SIZE = 1 << 20


def _secret_attributes(permissions: int | str | None, uid: int | None, gid: int | None) -> dict[str, Any]:
    """The attribute fields of a secret's body: only those given."""
    fields: dict[str, Any] = {"permissions": _octal(permissions), "uid": uid, "gid": gid}
    return {name: value for name, value in fields.items() if value is not None}


class SecretCalls(Requests):
    """
    The secret store, from outside.
    """

    async def secrets(self) -> list[dict[str, Any]]:
        """
        The metadata of every stored secret (``GET /secrets``): ``name``,
        ``size``, ``permissions`` (octal text), ``uid``, ``gid``, ``mod_time``;
        the daemon never sends a secret's content.
        """
        result: list[dict[str, Any]] = await self._json("GET", _path("secrets"))
        return result

    async def create_secret(
        self, name: str, data: bytes, *, permissions: int | str | None = None, uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        """
        Store a new secret ``name`` holding ``data`` (``POST /secrets``; sent
        as base64), placed in guests as ``/run/secrets/NAME`` with
        ``permissions`` (daemon default ``0600``), ``uid`` and ``gid``
        (default 0).

        :raise ApiError: 409 (``secret_exists``) when it exists, 400 for a
            bad name or too much content.
        """
        body: dict[str, Any] = {"name": name, "data": base64.b64encode(data).decode("ascii")}
        body.update(_secret_attributes(permissions, uid, gid))
        await self._request("POST", _path("secrets"), json=body)

    async def update_secret(
        self, name: str, data: bytes | None = None, *, permissions: int | str | None = None,
        uid: int | None = None, gid: int | None = None,
    ) -> None:
        """
        Change secret ``name`` (``PATCH /secrets/{secret}``): only what is
        given; running nodes that hold it get the change at once.

        :raise ApiError: 404 (``secret_not_found``) when there is none.
        """
        body: dict[str, Any] = {} if data is None else {"data": base64.b64encode(data).decode("ascii")}
        body.update(_secret_attributes(permissions, uid, gid))
        await self._request("PATCH", _path("secrets", name), json=body)

    async def delete_secret(self, name: str) -> None:
        """
        Delete secret ``name`` (``DELETE /secrets/{secret}``); running nodes
        that hold it lose its file.

        :raise ApiError: 404 (``secret_not_found``) when there is none.
        """
        await self._request("DELETE", _path("secrets", name))
