# -*- test-case-name: tests.api.test_secrets -*-
"""
The secrets store over HTTP: ``GET``/``POST /secrets``, ``PATCH``/``DELETE
/secrets/{secret}``.

Thin: the body is parsed by :mod:`.inputs.secrets`, the store
(:class:`vmservice.secretstore.SecretStore`) checks names and limits and says
what went wrong, and only metadata is ever rendered.  Bodies of create and
update are streamed into memory as they arrive (twisted.web would spool a
large one to a temporary file first), and refused past their limit.  Nodes
that hold a changed or deleted secret get the new set through the fleet,
which the store tells.
"""

from __future__ import annotations

from io import BytesIO

from twisted.web.iweb import IRequest

from ..errors import BodyTooLarge
from ..secretstore import SecretMeta, SecretStore
from .inputs.secrets import MAX_SECRET_BODY, secret_create, secret_update
from .models.meta import ErrorResponse
from .models.secrets import CreateSecretRequest, Secret, UpdateSecretRequest
from .query import NoQuery
from .rendering import format_mode, json_body
from .routing import Reply, Route
from .streaming import request_body


def secret_json(meta: SecretMeta) -> Secret:
    """The listing entry of a secret: its metadata, never its content."""
    return Secret(name=meta.name, size=meta.size, permissions=format_mode(meta.permissions), uid=meta.uid,
                  gid=meta.gid, mod_time=meta.mod_time, modified_at=meta.mod_time)


async def _read_body(request: IRequest, limit: int) -> None:
    """
    Take the whole body of ``request`` into memory (``request.content``), as
    it arrives: a secret's content never goes through a temporary file, and
    a body over ``limit`` bytes is read to its end but not held, then refused
    (answering only after the body, not from inside the network's delivery
    of a chunk, keeps the connection's state whole and the client reading).

    :raise BodyTooLarge: more than ``limit`` bytes (a body whose headers
        announce that many is refused before it is read: the route's ``max_body``).
    """
    body = request_body(request)
    chunks: list[bytes] = []
    held = 0

    def write(chunk: bytes) -> None:
        nonlocal held
        if held > limit:
            return
        held += len(chunk)
        if held > limit:
            chunks.clear()  # and the rest is dropped as it arrives
        else:
            chunks.append(chunk)

    await body.deliver_to(write)
    if held > limit:
        raise BodyTooLarge(f"the body is over this route's limit of {limit} bytes")
    request.content = BytesIO(b"".join(chunks))


def _empty(request: IRequest, status: int) -> bytes:
    """An answer without a body."""
    request.setResponseCode(status)
    return b""


_BAD = Reply("A bad name (invalid_secret_name), body (invalid_body), base64 (invalid_base64), content over 1 MiB "
             "(secret_too_large) or a full store (too_many_secrets)", ErrorResponse)
_FAILED = Reply("The store could not be read or written (secret_store_failed)", ErrorResponse)
_NO_ROOM = Reply("The state directory has no room for the secret (state_dir_full); it is as it was", ErrorResponse)


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
                   409: Reply("A secret of that name exists (secret_exists)", ErrorResponse), 500: _FAILED,
                   507: _NO_ROOM},
                  body=CreateSecretRequest, stream_body=True, max_body=MAX_SECRET_BODY),
            Route("PATCH", "/secrets/{secret}", self.update,
                  "Change a secret's content or attributes; running nodes that hold it get it at once", "secrets",
                  {200: Reply("Changed (no body)"), 400: _BAD,
                   404: Reply("No such secret (secret_not_found)", ErrorResponse), 500: _FAILED, 507: _NO_ROOM},
                  body=UpdateSecretRequest, stream_body=True, max_body=MAX_SECRET_BODY),
            Route("DELETE", "/secrets/{secret}", self.delete,
                  "Delete a secret; running nodes that hold it lose its file", "secrets",
                  {200: Reply("Deleted (no body)"), 400: _BAD,
                   404: Reply("No such secret (secret_not_found)", ErrorResponse), 500: _FAILED}),
        ]

    async def list(self, request: IRequest, query: NoQuery) -> bytes:
        return json_body(request, [secret_json(meta) for meta in self._store.list()])

    async def create(self, request: IRequest, query: NoQuery) -> bytes:
        await _read_body(request, MAX_SECRET_BODY)
        self._store.create(secret_create(request))
        return _empty(request, 201)

    async def update(self, request: IRequest, query: NoQuery, secret: str) -> bytes:
        await _read_body(request, MAX_SECRET_BODY)
        self._store.update(secret, secret_update(request))
        return _empty(request, 200)

    async def delete(self, request: IRequest, query: NoQuery, secret: str) -> bytes:
        self._store.delete(secret)
        return _empty(request, 200)
