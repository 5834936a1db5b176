# -*- test-case-name: tests.errors.test_guest -*-
"""
What goes wrong with an operation in a guest: the agent code raises
:class:`AgentError` with a :class:`GuestErrorKind`, and :data:`GUEST_ERRORS`
is the one table that says which service error each kind is.
"""

from __future__ import annotations

from enum import Enum

from .service import (
    AgentNotConnected,
    BadGateway,
    BadRequest,
    BufferBudgetExhausted,
    Conflict,
    Forbidden,
    GatewayTimeout,
    Gone,
    InsufficientStorage,
    Internal,
    NotFound,
    NotSupported,
    ServiceError,
    StateDirFull,
)


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
