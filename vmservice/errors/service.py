# -*- test-case-name: tests.errors.test_service -*-
"""
The errors the service reports to a caller: :class:`ServiceError` and its
subclasses, each with the HTTP status it maps to (see
:func:`vmservice.errors.http.http_error`) and a stable snake_case ``code``
that clients may match on.
"""

from __future__ import annotations


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


class ForbiddenOrigin(ServiceError):
    """
    A browser's cross-origin request that could change something (403): its
    ``Origin`` is not one the daemon allows, or it says ``Sec-Fetch-Site:
    cross-site``.
    """

    status = 403
    code = "forbidden_origin"


class BodyTooLarge(BadRequest):
    """
    A request body over its route's limit (413): bad input by its size
    alone.  Refused when the headers announce it, or as the body reaches the
    limit; the connection is not reused.
    """

    status = 413
    code = "body_too_large"


class MisdirectedRequest(ServiceError):
    """
    A ``Host`` that names another server than this daemon (421): what a page
    that rebinds its own DNS name to the daemon's address sends.
    """

    status = 421
    code = "invalid_host"


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


class Gone(ServiceError):
    """The thing asked for existed and was deleted (410): a reaped background exec."""

    status = 410
    code = "gone"


class AgentNotConnected(ServiceError):
    """
    The guest agent of a node does not answer (503).

    503 rather than 500: the daemon is fine, the node's agent is not reachable
    (yet), and a retry later may succeed.
    """

    status = 503
    code = "agent_unavailable"


class InsufficientMemory(ServiceError):
    """
    The host cannot hold another VM now (503): starting it would take the
    VMs of this daemon past the memory budget (``admission.memory_budget``).
    Refused before anything was made; a retry once other nodes stopped,
    were suspended or deleted may succeed, hence 503 rather than a 4xx.
    """

    status = 503
    code = "insufficient_memory"


class BufferBudgetExhausted(ServiceError):
    """
    The daemon cannot hold one more buffered result now (503): the results it
    buffers for clients at once (buffered execs' output, large guest replies)
    are at its buffer budget (``limits.buffer_budget``).  The operation that
    needed the room failed (a buffered exec's process was stopped); a retry
    once others finished may succeed, hence 503 rather than a 4xx.
    """

    status = 503
    code = "buffer_budget_exhausted"


class TooManyConnections(ServiceError):
    """
    The client's address holds as many connections to the API as it may
    (``limits.max_connections_per_peer``) (429): the new one is answered with
    this and closed.
    """

    status = 429
    code = "too_many_connections"


class ConnectionLimitReached(ServiceError):
    """
    The API holds as many connections as the daemon allows
    (``limits.max_connections``) (503): the new one is answered with this and
    closed.
    """

    status = 503
    code = "connection_limit_reached"


class InsufficientStorage(ServiceError):
    """
    The guest's file system has no room for what is copied into it (507):
    refused before anything was written when the client announced the size,
    or met while writing (what was written is removed).
    """

    status = 507
    code = "insufficient_storage"


class StateDirFull(ServiceError):
    """
    The daemon's state directory has no room (507) for what an operation
    had to write there: a node's record or disk, a snapshot, a secret, a
    template.  Distinct from :class:`InsufficientStorage`, which is the
    guest's own file system: this one is the host's, for its operator to
    free.  Whatever was half-written is removed (or was never in place);
    the same request succeeds once there is room again.
    """

    status = 507
    code = "state_dir_full"


class BadGateway(ServiceError):
    """
    Something the daemon relies on upstream failed (502): a tunnel's upstream
    in the guest (refused, unreachable), or the code host that publishes a
    ``codehost_user``'s keys.
    """

    status = 502
    code = "bad_gateway"


class GatewayTimeout(ServiceError):
    """Connecting to a tunnel's upstream in the guest timed out (504)."""

    status = 504
    code = "gateway_timeout"


class NotSupported(ServiceError):
    """The operation is not supported by this driver or not yet (501)."""

    status = 501
    code = "not_supported"


class Internal(ServiceError):
    """Something failed inside the daemon (500); the message says what."""

    status = 500
    code = "internal_error"
