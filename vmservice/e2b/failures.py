# -*- test-case-name: tests.e2b.test_rendering -*-
"""
The one mapping from the domain's errors to the E2B API's answers: a status
the call's generated client parses (:data:`DOCUMENTED`, from E2B's public
OpenAPI specification) and E2B's body, ``{"code": <status>, "message": ...}``.

Bad input is always 400, and the request gate's refusals of what browsers
send (another ``Host``: 421; another ``Origin``: 403) keep their statuses:
no SDK meets them.  Any other status a call's specification does not
list becomes 500 (with the message kept): an SDK that meets a status it does
not know reports "Body of the request is None" instead of the message.
"""

from __future__ import annotations

import json
from enum import Enum

from ..errors import BadRequest, ForbiddenOrigin, MisdirectedRequest, ServiceError, WaitTimeout


class Call(Enum):
    """The control plane's calls, as the generated clients know them."""

    CREATE = "create"
    LIST = "list"
    INFO = "info"
    KILL = "kill"
    TIMEOUT = "timeout"
    CONNECT = "connect"
    PAUSE = "pause"
    METRICS = "metrics"
    OTHER = "other"


#: The error statuses each call's client parses (SDKs 2.45 to 2.6x alike).
DOCUMENTED: dict[Call, frozenset[int]] = {
    Call.CREATE: frozenset({400, 401, 429, 500, 503, 504}),
    Call.LIST: frozenset({400, 401, 429, 500}),
    Call.INFO: frozenset({401, 404, 429, 500}),
    Call.KILL: frozenset({401, 404, 409, 429, 500}),
    Call.TIMEOUT: frozenset({401, 404, 429, 500}),
    Call.CONNECT: frozenset({400, 401, 404, 409, 429, 500, 503, 504}),
    Call.PAUSE: frozenset({401, 404, 409, 429, 500, 503}),
    Call.METRICS: frozenset({400, 401, 404, 429, 500}),
    Call.OTHER: frozenset({400, 401, 404, 405, 500}),
}


def error_body(status: int, message: str) -> bytes:
    """E2B's error body."""
    return json.dumps({"code": status, "message": message}).encode()


def failure_of(error: BaseException, call: Call) -> tuple[int, bytes]:
    """The status and body that answer ``error`` raised by ``call``."""
    if isinstance(error, BadRequest):
        return 400, error_body(400, error.message)
    if isinstance(error, (ForbiddenOrigin, MisdirectedRequest)):
        return error.status, error_body(error.status, error.message)
    if isinstance(error, ServiceError):
        status, message = error.status, error.message
        if isinstance(error, WaitTimeout):
            status = 504
    else:
        status, message = 500, "internal error"
    if status not in DOCUMENTED[call]:
        status = 500
    return status, error_body(status, message)


__all__ = ["Call", "DOCUMENTED", "error_body", "failure_of"]
