# -*- test-case-name: tests.api.test_secrets -*-
"""
The bodies of a secret's create and update; no message ever quotes the content.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from twisted.web.iweb import IRequest

from ...errors import BadRequest
from ...secretstore import DEFAULT_PERMISSIONS, MAX_SECRET_SIZE, SecretChange, SecretSpec
from ..models.secrets import BASE64_PATTERN, CreateSecretRequest, UpdateSecretRequest
from .bodies import json_object, structure


#: The largest body of a secret's create or update: its content in base64, and room for the rest.
MAX_SECRET_BODY = (MAX_SECRET_SIZE + 2) // 3 * 4 + 64 * 1024


def _secret_content(raw: dict[str, Any]) -> bytes | None:
    """
    The decoded ``data`` of a secret's body, taken out of ``raw``; ``None``
    when absent.  No message ever quotes the value: it is a secret.

    :raise BadRequest: (``invalid_body``) not a string; (``invalid_base64``)
        not standard base64 (line breaks and blanks are ignored);
        (``secret_too_large``) more than MAX_SECRET_SIZE bytes once decoded.
    """
    value = raw.pop("data", None)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest("field 'data' must be a string (the content in base64)", code="invalid_body")
    text = "".join(value.split())
    if len(text) > MAX_SECRET_BODY:
        raise BadRequest(f"field 'data' holds more than {MAX_SECRET_SIZE} bytes", code="secret_too_large")
    try:
        if re.fullmatch(BASE64_PATTERN, value) is None:  # what the document says (b64decode takes "QUJD=")
            raise binascii.Error("not the document's base64")
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise BadRequest("field 'data' is not valid base64", code="invalid_base64") from None
    if len(data) > MAX_SECRET_SIZE:
        raise BadRequest(f"field 'data' holds {len(data)} bytes; at most {MAX_SECRET_SIZE} are allowed",
                         code="secret_too_large")
    return data


def _secret_permissions(text: str | None) -> int | None:
    """:raise BadRequest: (``invalid_body``) not octal permission bits up to 0777."""
    if text is None:
        return None
    if not re.fullmatch("0?[0-7]{1,3}", text):
        raise BadRequest(f"field 'permissions' must be octal permission bits such as 0400 (at most 0777), "
                         f"not {text[:16]!r}", code="invalid_body")
    return int(text, 8)


def _secret_id(name: str, value: int | None) -> int | None:
    """:raise BadRequest: (``invalid_body``) not a uid or gid."""
    if value is not None and not 0 <= value <= 2**32 - 2:
        raise BadRequest(f"field {name!r} must be 0 .. {2**32 - 2}", code="invalid_body")
    return value


def secret_create(request: IRequest) -> SecretSpec:
    """
    Parse the body of ``POST /secrets``: a name, ``data`` in base64, and
    optional ``permissions`` (octal text, default 0600), ``uid`` and ``gid``
    (default 0).

    :raise BadRequest: what is wrong (never quoting the content); a bad
        name is the store's to say.
    """
    raw = json_object(request, empty_ok=False, limit=MAX_SECRET_BODY)
    data = _secret_content(raw)
    if data is None:
        raise BadRequest("field 'data' is required (the content in base64)", code="invalid_body")
    body = structure({**raw, "data": ""}, CreateSecretRequest)
    permissions = _secret_permissions(body.permissions)
    return SecretSpec(
        name=body.name,
        data=data,
        permissions=DEFAULT_PERMISSIONS if permissions is None else permissions,
        uid=_secret_id("uid", body.uid) or 0,
        gid=_secret_id("gid", body.gid) or 0,
    )


def secret_update(request: IRequest) -> SecretChange:
    """
    Parse the body of ``PATCH /secrets/{secret}``: any of ``data`` (base64),
    ``permissions``, ``uid`` and ``gid``; absent or ``null`` ones stay as
    they are (an empty body changes nothing).

    :raise BadRequest: what is wrong (never quoting the content).
    """
    raw = json_object(request, limit=MAX_SECRET_BODY)
    data = _secret_content(raw)
    body = structure(raw, UpdateSecretRequest)
    return SecretChange(
        data=data,
        permissions=_secret_permissions(body.permissions),
        uid=_secret_id("uid", body.uid),
        gid=_secret_id("gid", body.gid),
    )
