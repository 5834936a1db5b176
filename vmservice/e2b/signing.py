# -*- test-case-name: tests.e2b.test_signing -*-
"""
Signed file URLs, as envd checks them (its ``generateSignature`` and
``validateSigning``): ``GET``/``POST /files`` without the access token may
carry ``signature=v1_<sig>`` and ``signature_expiration=<unix seconds>``,
where ``<sig>`` is the SHA-256 of ``path:operation:user:token[:expiration]``
in base64 without padding (the standard alphabet), ``operation`` ``read``
for a download and ``write`` for an upload, ``user`` the ``username``
parameter as sent (``""`` when absent) and ``path`` the ``path`` parameter
as sent.

A signed URL carries no sandbox id (the SDKs build it on the sandbox URL,
which may be shared by every sandbox): :func:`signed_sandbox` finds the
running sandbox whose token made the signature.
"""

from __future__ import annotations

import hashlib
from base64 import b64encode
from hmac import compare_digest
from typing import Iterable

from attrs import frozen

#: The operation a download's signature names.
READ = "read"
#: The operation an upload's signature names.
WRITE = "write"


@frozen
class FilesQuery:
    """
    The parameters of a ``/files`` request, as sent.

    :ivar path: ``path`` (``""`` when absent).
    :ivar username: ``username``, or ``None``.
    :ivar signature: ``signature``, or ``None``.
    :ivar expiration: ``signature_expiration``, or ``None``.
    """

    path: str = ""
    username: str | None = None
    signature: str | None = None
    expiration: int | None = None


class BadQuery(ValueError):
    """A parameter of a ``/files`` request is not what it must be."""


def _one(args: dict[bytes, list[bytes]], name: bytes) -> str | None:
    values = args.get(name)
    return values[0].decode("utf-8", "replace") if values else None


def files_query(args: dict[bytes, list[bytes]]) -> FilesQuery:
    """
    A request's :class:`FilesQuery` from its parsed query (``request.args``).

    :raise BadQuery: a ``signature_expiration`` that is not a number.
    """
    expiration = _one(args, b"signature_expiration")
    if expiration is not None and not (expiration.lstrip("-").isdigit() and len(expiration) <= 19):
        raise BadQuery("Invalid format for parameter signature_expiration")
    return FilesQuery(_one(args, b"path") or "", _one(args, b"username"), _one(args, b"signature"),
                      int(expiration) if expiration is not None else None)


def operation_of(method: bytes) -> str:
    """The operation a request of ``method`` signs: ``write`` for ``POST``, else ``read``."""
    return WRITE if method == b"POST" else READ


def signature(path: str, operation: str, username: str, token: str, expiration: int | None) -> str:
    """The ``v1_`` signature of ``operation`` on ``path`` as ``username`` with ``token``."""
    parts = [path, operation, username, token] + ([str(expiration)] if expiration is not None else [])
    digest = hashlib.sha256(":".join(parts).encode("utf-8")).digest()
    return "v1_" + b64encode(digest).rstrip(b"=").decode("ascii")


def signed_by(query: FilesQuery, operation: str, token: str) -> bool:
    """Whether ``token`` made ``query``'s signature for ``operation`` (its expiry is not looked at)."""
    if not token or query.signature is None:
        return False
    expected = signature(query.path, operation, query.username or "", token, query.expiration)
    return compare_digest(expected.encode("ascii"), query.signature.encode("utf-8", "replace"))


def check_signature(query: FilesQuery, operation: str, token: str, now: float) -> str | None:
    """
    Why ``query`` may not ``operation`` with a sandbox whose token is
    ``token``, in envd's words; ``None`` when it may.
    """
    if query.signature is None:
        return "missing signature query parameter"
    if not signed_by(query, operation, token):
        return "invalid signature"
    if query.expiration is not None and query.expiration < int(now):
        return "signature is already expired"
    return None


def signed_sandbox(query: FilesQuery, operation: str, tokens: Iterable[tuple[str, str]]) -> str | None:
    """The id of the sandbox, of ``(id, token)`` pairs, whose token made ``query``'s signature."""
    for sandbox_id, token in tokens:
        if signed_by(query, operation, token):
            return sandbox_id
    return None


__all__ = ["BadQuery", "FilesQuery", "READ", "WRITE", "check_signature", "files_query", "operation_of",
           "signature", "signed_by", "signed_sandbox"]
