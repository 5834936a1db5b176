# -*- test-case-name: tests.e2b.test_inputs -*-
"""
The one place the E2B API's request bodies are read (pure): JSON objects
whose known keys are checked for type and bounded (template ids, timeouts,
metadata and environment sizes); keys the SDKs send that this daemon does
not act on (``mcp``, ``network``, ``allow_internet_access``, ``autoResume``,
``memory``, ...) are taken as sent and ignored.  Bad input is
:class:`~vmservice.errors.BadRequest` (400).
"""

from __future__ import annotations

import json
import re
from typing import Any

from attrs import frozen

from ..config.resolve_e2b import TEMPLATE_ID
from ..errors import BadRequest

#: The most bytes of a request body (the biggest, a create, is bounded far below it by the limits here).
MAX_BODY = 1024 * 1024
#: The most metadata pairs of a sandbox, and characters of a key and of a value.
MAX_METADATA, MAX_METADATA_KEY, MAX_METADATA_VALUE = 64, 128, 1024
#: The most environment variables of a sandbox, characters of a value, and characters of them all.
MAX_ENV_VARS, MAX_ENV_VALUE, MAX_ENV_TOTAL = 256, 32 * 1024, 256 * 1024
#: An environment variable's name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")


@frozen
class NewSandbox:
    """
    A create, as read (E2B's ``NewSandbox``).

    :ivar timeout: seconds it lives, ``None`` for the configured default.
    :ivar secure: its data plane asks for an access token (the SDKs' default).
    """

    template_id: str
    timeout: int | None = None
    auto_pause: bool = False
    metadata: tuple[tuple[str, str], ...] = ()
    env_vars: tuple[tuple[str, str], ...] = ()
    secure: bool = True


def _object(body: bytes, optional: bool = False) -> dict[str, Any]:
    """``body`` as a JSON object (an empty body is ``{}`` when ``optional``)."""
    if not body.strip() and optional:
        return {}
    if len(body) > MAX_BODY:
        raise BadRequest(f"the body is over {MAX_BODY} bytes")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise BadRequest("the body is not JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("the body is not a JSON object")
    return data


def _flag(data: dict[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false")
    return value


def timeout_of(data: dict[str, Any], most: int, required: bool) -> int | None:
    """The ``timeout`` of ``data``: whole seconds from 0 to ``most``; ``None`` when absent and not ``required``."""
    value = data.get("timeout")
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest("timeout must be a whole number of seconds")
    if not 0 <= value <= most:
        raise BadRequest(f"timeout must be from 0 to {most} seconds")
    return value


def _pairs(data: dict[str, Any], key: str) -> list[tuple[str, str]]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BadRequest(f"{key} must be an object of strings")
    return list(value.items())


def metadata_of(data: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """``metadata``: at most 64 pairs, keys of 1 to 128 characters, values of at most 1024."""
    pairs = _pairs(data, "metadata")
    if len(pairs) > MAX_METADATA:
        raise BadRequest(f"metadata has at most {MAX_METADATA} keys")
    for key, value in pairs:
        if not 1 <= len(key) <= MAX_METADATA_KEY or len(value) > MAX_METADATA_VALUE:
            raise BadRequest(f"metadata keys have 1 to {MAX_METADATA_KEY} characters, values at most "
                             f"{MAX_METADATA_VALUE}")
    return tuple(pairs)


def env_vars_of(data: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """``envVars``: at most 256 variables with shell names, values of at most 32 KiB, 256 KiB in all."""
    pairs = _pairs(data, "envVars")
    if len(pairs) > MAX_ENV_VARS:
        raise BadRequest(f"envVars has at most {MAX_ENV_VARS} variables")
    for key, value in pairs:
        if not ENV_NAME.fullmatch(key):
            raise BadRequest(f"bad environment variable name {key[:64]!r}")
        if len(value) > MAX_ENV_VALUE or "\0" in value:
            raise BadRequest(f"an environment variable's value has at most {MAX_ENV_VALUE} characters, no NUL")
    if sum(len(key) + len(value) for key, value in pairs) > MAX_ENV_TOTAL:
        raise BadRequest(f"envVars hold at most {MAX_ENV_TOTAL} characters in all")
    return tuple(pairs)


def new_sandbox(body: bytes, most: int) -> NewSandbox:
    """A create's body (``POST /sandboxes``, ``POST /v2/sandboxes``); ``most`` is the longest timeout."""
    data = _object(body)
    template = data.get("templateID")
    if not isinstance(template, str) or not TEMPLATE_ID.fullmatch(template):
        raise BadRequest("templateID must be a template id (letters, digits and . _ : / -, at most 128 characters)")
    return NewSandbox(
        template_id=template, timeout=timeout_of(data, most, required=False),
        auto_pause=_flag(data, "autoPause", False), metadata=metadata_of(data), env_vars=env_vars_of(data),
        secure=_flag(data, "secure", True),
    )


def set_timeout(body: bytes, most: int) -> int:
    """A ``POST /sandboxes/{id}/timeout`` body: its ``timeout`` (required)."""
    timeout = timeout_of(_object(body), most, required=True)
    assert timeout is not None
    return timeout


def connect(body: bytes, most: int) -> int | None:
    """A connect's body: its ``timeout``, ``None`` when it names none (an empty body names none)."""
    return timeout_of(_object(body, optional=True), most, required=False)


def pause(body: bytes) -> None:
    """A pause's body: optional, an object when given (its ``memory`` choice is not acted on: a pause keeps it)."""
    _object(body, optional=True)


__all__ = ["MAX_BODY", "NewSandbox", "connect", "env_vars_of", "metadata_of", "new_sandbox", "pause", "set_timeout",
           "timeout_of"]
