# -*- test-case-name: tests.api.test_secrets -*-
"""
The secrets store over HTTP: ``GET``/``POST /secrets``, ``PATCH``/``DELETE
/secrets/{name}``.

Thin: the body is parsed by :mod:`.inputs`, the store
(:class:`vmservice.secretstore.SecretStore`) checks names and limits and says
what went wrong, and only metadata is ever rendered.  Nodes that hold a
changed or deleted secret get the new set through the fleet, which the store
tells.
"""

from __future__ import annotations

from twisted.web.iweb import IRequest

from ..secretstore import SecretMeta, SecretStore
from . import inputs
from .models import CreateSecretRequest, ErrorResponse, Secret, UpdateSecretRequest
from .query import NoQuery
from .rendering import format_mode, json_body
from .routing import Reply, Route


def secret_json(meta: SecretMeta) -> Secret:
    """The listing entry of a secret: its metadata, never its content."""
    return Secret(name=meta.name, size=meta.size, permissions=format_mode(meta.permissions), uid=meta.uid,
                  gid=meta.gid, mod_time=meta.mod_time)


def _empty(request: IRequest, status: int) -> bytes:
    """An answer without a body."""
    request.setResponseCode(status)
    return b""


_BAD = Reply("A bad name (invalid_secret_name), body (invalid_body), base64 (invalid_base64), content over 1 MiB "
             "(secret_too_large) or a full store (too_many_secrets)", ErrorResponse)
_FAILED = Reply("The store could not be read or written (secret_store_failed)", ErrorResponse)


class SecretsApi:
    """:param store: the daemon's secrets store."""

    def __init__(self, store: SecretStore) -> None:
        self._store = store

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/secrets", self.list, "List the secrets (metadata only)", "secrets",
                  {200: Reply("Every secret's metadata, by name", Secret, array=True), 500: _FAILED}),
            Route("POST", "/secrets", self.create, "Store a new secret", "secrets",
                  {201: Reply("Stored (no body)"), 400: _BAD,
                   409: Reply("A secret of that name exists (secret_exists)", ErrorResponse), 500: _FAILED},
                  body=CreateSecretRequest),
            Route("PATCH", "/secrets/{name}", self.update,
                  "Change a secret's content or attributes; running nodes that hold it get it at once", "secrets",
                  {200: Reply("Changed (no body)"), 400: _BAD,
                   404: Reply("No such secret (secret_not_found)", ErrorResponse), 500: _FAILED},
                  body=UpdateSecretRequest),
            Route("DELETE", "/secrets/{name}", self.delete,
                  "Delete a secret; running nodes that hold it lose its file", "secrets",
                  {200: Reply("Deleted (no body)"), 400: _BAD,
                   404: Reply("No such secret (secret_not_found)", ErrorResponse), 500: _FAILED}),
        ]

    async def list(self, request: IRequest, query: NoQuery) -> bytes:
        return json_body(request, [secret_json(meta) for meta in self._store.list()])

    async def create(self, request: IRequest, query: NoQuery) -> bytes:
        self._store.create(inputs.secret_create(request))
        return _empty(request, 201)

    async def update(self, request: IRequest, query: NoQuery, name: str) -> bytes:
        self._store.update(name, inputs.secret_update(request))
        return _empty(request, 200)

    async def delete(self, request: IRequest, query: NoQuery, name: str) -> bytes:
        self._store.delete(name)
        return _empty(request, 200)
