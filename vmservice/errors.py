# -*- test-case-name: tests.test_errors -*-
"""
The error vocabulary of vmservice and its single mapping to HTTP.

Domain code raises :class:`ServiceError` subclasses; the code that talks to a
guest agent raises :class:`AgentError` with a :class:`GuestErrorKind`, and
:data:`GUEST_ERRORS` is the one table that says which service error each kind
is.  Only :func:`http_error` (called by the API's error renderer) turns either
into a status code and an ErrorResponse body.  Every error carries a stable
snake_case ``code`` that clients may match on.
"""

from __future__ import annotations

import errno
import os
from enum import Enum
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


#: The errnos of a file system that has no room (left) for a write.
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: How a child process (``qemu-img``, QEMU) words them in its messages.
NO_ROOM_WORDS = tuple(os.strerror(number) for number in sorted(NO_ROOM_ERRNOS))


def no_room(error: BaseException) -> bool:
    """
    Whether ``error`` says a file system had no room for a write: an
    ``OSError`` with ``ENOSPC`` or ``EDQUOT``, or any other error whose
    message holds the system's words for them (``No space left on device``,
    ``Disk quota exceeded``), as a child process's does.  The errors it was
    raised from (``raise ... from error``) count too.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in NO_ROOM_ERRNOS:
            return True
        if any(words in str(current) for words in NO_ROOM_WORDS):
            return True
        current = current.__cause__
    return False


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


class GuestErrorKind(Enum):
    """What went wrong with an operation in a guest, as the agent code tells it."""

    #: The agent is not connected, or the connection (or the agent) went away.
    UNAVAILABLE = "unavailable"
    #: The guest agent does not know the operation (its image is older).
    UNSUPPORTED = "unsupported"
    #: The guest failed the operation (a stream reset with an error code).
    FAILED = "failed"
    #: The guest answered something that does not parse.
    MALFORMED = "malformed"
    #: The guest's answer was larger than the daemon accepts.
    TOO_LARGE = "too_large"
    #: The daemon's buffer budget had no room for the guest's answer.
    OVER_BUDGET = "over_budget"
    #: The guest refused the request itself (an exec's working directory ...).
    REJECTED = "rejected"
    #: A copy out of the guest ended after its head without all its content.
    INTERRUPTED = "interrupted"
    # The guest's own error kinds of file operations (docs/agent-protocol.md).
    NOT_FOUND = "not_found"
    NOT_A_DIRECTORY = "not_a_directory"
    IS_A_DIRECTORY = "is_a_directory"
    NOT_EMPTY = "not_empty"
    EXISTS = "exists"
    BUSY = "busy"
    PERMISSION_DENIED = "permission_denied"
    INVALID = "invalid"
    UNSAFE_ENTRY = "unsafe_entry"
    UNSUPPORTED_ENTRY = "unsupported_entry"
    BAD_ARCHIVE = "bad_archive"
    #: A copy's destination ends in ``/`` but is no directory.
    MISSING_DESTINATION = "missing_destination"
    #: The guest's file system has no room for a copy.
    NO_SPACE = "no_space"
    # The guest's error kinds of background execs.
    GONE = "gone"
    RUNNING = "running"
    #: Any other file-system error the guest reports.
    FS_ERROR = "fs_error"
    #: A step of adopting an identity (``adopt``) failed in the guest.
    ADOPTION_FAILED = "adoption_failed"
    #: The VM stopped because the host's state directory had no room for its
    #: disk's writes; the daemon cut off what was under way in the guest.
    HOST_NO_ROOM = "host_no_room"
    # Why a tunnel's upstream cannot be reached (the guest's head of a forward).
    UPSTREAM_REFUSED = "upstream_refused"
    UPSTREAM_UNREACHABLE = "upstream_unreachable"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    UPSTREAM_NOT_FOUND = "upstream_not_found"
    UPSTREAM_INVALID = "upstream_invalid"

    @classmethod
    def of_guest(cls, name: object) -> "GuestErrorKind":
        """The kind a guest reply names (``"not_found"`` ...); an unknown name is :attr:`FS_ERROR`."""
        for kind in _GUEST_NAMED:
            if kind.value == name:
                return kind
        return cls.FS_ERROR


class AgentError(Exception):
    """
    An operation in a guest failed; raised by the agent code, never an HTTP
    error itself (:data:`GUEST_ERRORS` maps its kind).

    :ivar kind: what went wrong.
    :ivar message: says it in words, for the ErrorResponse.
    """

    def __init__(self, kind: GuestErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return self.message


#: The kinds a guest reply may name itself.
_GUEST_NAMED = (
    GuestErrorKind.NOT_FOUND,
    GuestErrorKind.NOT_A_DIRECTORY,
    GuestErrorKind.IS_A_DIRECTORY,
    GuestErrorKind.NOT_EMPTY,
    GuestErrorKind.EXISTS,
    GuestErrorKind.BUSY,
    GuestErrorKind.PERMISSION_DENIED,
    GuestErrorKind.INVALID,
    GuestErrorKind.UNSAFE_ENTRY,
    GuestErrorKind.UNSUPPORTED_ENTRY,
    GuestErrorKind.BAD_ARCHIVE,
    GuestErrorKind.MISSING_DESTINATION,
    GuestErrorKind.NO_SPACE,
    GuestErrorKind.REJECTED,
    GuestErrorKind.GONE,
    GuestErrorKind.RUNNING,
)

#: The one table from guest error kinds to service errors: the class (so the
#: status) and the ErrorResponse code.
GUEST_ERRORS: dict[GuestErrorKind, tuple[type[ServiceError], str]] = {
    GuestErrorKind.UNAVAILABLE: (AgentNotConnected, "agent_unavailable"),
    GuestErrorKind.UNSUPPORTED: (NotSupported, "not_supported"),
    GuestErrorKind.FAILED: (Internal, "agent_error"),
    GuestErrorKind.MALFORMED: (Internal, "agent_error"),
    GuestErrorKind.TOO_LARGE: (Internal, "reply_too_large"),
    GuestErrorKind.OVER_BUDGET: (BufferBudgetExhausted, "buffer_budget_exhausted"),
    GuestErrorKind.REJECTED: (BadRequest, "invalid_exec"),
    GuestErrorKind.INTERRUPTED: (Internal, "copy_interrupted"),
    GuestErrorKind.NOT_FOUND: (NotFound, "not_found"),
    GuestErrorKind.NOT_A_DIRECTORY: (BadRequest, "not_a_directory"),
    GuestErrorKind.IS_A_DIRECTORY: (BadRequest, "is_a_directory"),
    GuestErrorKind.NOT_EMPTY: (Conflict, "directory_not_empty"),
    GuestErrorKind.EXISTS: (Conflict, "already_exists"),
    GuestErrorKind.BUSY: (Conflict, "busy"),
    GuestErrorKind.PERMISSION_DENIED: (Forbidden, "permission_denied"),
    GuestErrorKind.INVALID: (BadRequest, "invalid_path"),
    GuestErrorKind.UNSAFE_ENTRY: (BadRequest, "unsafe_entry"),
    GuestErrorKind.UNSUPPORTED_ENTRY: (BadRequest, "unsupported_entry"),
    GuestErrorKind.BAD_ARCHIVE: (BadRequest, "bad_archive"),
    GuestErrorKind.MISSING_DESTINATION: (BadRequest, "missing_destination"),
    GuestErrorKind.NO_SPACE: (InsufficientStorage, "insufficient_storage"),
    GuestErrorKind.GONE: (Gone, "exec_deleted"),
    GuestErrorKind.RUNNING: (Conflict, "exec_running"),
    GuestErrorKind.FS_ERROR: (Internal, "fs_error"),
    GuestErrorKind.ADOPTION_FAILED: (Internal, "adoption_failed"),
    GuestErrorKind.HOST_NO_ROOM: (StateDirFull, "state_dir_full"),
    GuestErrorKind.UPSTREAM_REFUSED: (BadGateway, "upstream_refused"),
    GuestErrorKind.UPSTREAM_UNREACHABLE: (BadGateway, "upstream_unreachable"),
    GuestErrorKind.UPSTREAM_TIMEOUT: (GatewayTimeout, "upstream_timeout"),
    GuestErrorKind.UPSTREAM_NOT_FOUND: (BadGateway, "upstream_not_found"),
    GuestErrorKind.UPSTREAM_INVALID: (BadRequest, "invalid_upstream"),
}


def service_error(error: AgentError) -> ServiceError:
    """The service error an agent error is, by :data:`GUEST_ERRORS`."""
    kind, code = GUEST_ERRORS[error.kind]
    return kind(error.message, code=code)


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
