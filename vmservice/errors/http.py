# -*- test-case-name: tests.errors.test_http -*-
"""
The one mapping of any error to HTTP: a status and an ErrorResponse body
(called by the API's error renderer only).
"""

from __future__ import annotations

from typing import Any

from .guest import AgentError, service_error
from .service import ServiceError


def http_error(error: BaseException) -> tuple[int, dict[str, Any]]:
    """
    Map any exception to an HTTP status and an ErrorResponse body.

    Unknown exceptions become a 500 with a generic message: a traceback is
    logged by the caller, never sent to the client.

    :param error: the exception raised while serving a request.
    :return: ``(status, {"error": ..., "code": ...})``
    """
    if isinstance(error, AgentError):
        error = service_error(error)
    if isinstance(error, ServiceError):
        return error.status, {"error": error.message, "code": error.code}
    return 500, {"error": "internal error", "code": "internal_error"}
