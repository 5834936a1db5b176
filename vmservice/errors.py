# -*- test-case-name: tests.test_errors -*-
"""
The error vocabulary of vmservice and its single mapping to HTTP.

Domain code raises these; only :func:`http_error` (called by the API's error
renderer) turns them into a status code and an ErrorResponse body.  Every
error carries a stable snake_case ``code`` that clients may match on.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """
    Base of every error the service reports to a caller.

    :cvar status: the HTTP status this kind of error maps to.
    :cvar code: the default stable snake_case code for the ErrorResponse.
    """

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class BadRequest(ServiceError):
    """The caller's input is invalid (400)."""

    status = 400
    code = "bad_request"


class Unauthorized(ServiceError):
    """Missing or invalid credentials (401)."""

    status = 401
    code = "unauthorized"


class Protected(ServiceError):
    """The node is protected and cannot be deleted (403)."""

    status = 403
    code = "protected"


class Forbidden(ServiceError):
    """
    The guest refused an operation on a file (403): permission denied, a
    read-only file system.  Distinct from :class:`Protected`, which is about
    nodes.
    """

    status = 403
    code = "permission_denied"


class NotFound(ServiceError):
    """A host group, node, route or file does not exist (404)."""

    status = 404
    code = "not_found"


class MethodNotAllowed(ServiceError):
    """The route exists but not for this method (405)."""

    status = 405
    code = "method_not_allowed"


class WaitTimeout(ServiceError):
    """A ``wait`` on create ran out of time; the VM was removed (408)."""

    status = 408
    code = "wait_timeout"


class Conflict(ServiceError):
    """The request conflicts with the node's current state (409)."""

    status = 409
    code = "conflict"


class AgentNotConnected(ServiceError):
    """
    The guest agent of a node does not answer (503).

    503 rather than 500: the daemon is fine, the node's agent is not reachable
    (yet), and a retry later may succeed.
    """

    status = 503
    code = "agent_unavailable"


class NotSupported(ServiceError):
    """The operation is not supported by this driver or not yet (501)."""

    status = 501
    code = "not_supported"


class Internal(ServiceError):
    """Something failed inside the daemon (500); the message says what."""

    status = 500
    code = "internal_error"


def http_error(error: BaseException) -> tuple[int, dict[str, Any]]:
    """
    Map any exception to an HTTP status and an ErrorResponse body.

    Unknown exceptions become a 500 with a generic message: a traceback is
    logged by the caller, never sent to the client.

    :param error: the exception raised while serving a request.
    :return: ``(status, {"error": ..., "code": ...})``
    """
    if isinstance(error, ServiceError):
        return error.status, {"error": error.message, "code": error.code}
    return 500, {"error": "internal error", "code": "internal_error"}
