# -*- test-case-name: tests.e2b.test_envd_failures -*-
"""
The one mapping from the domain's errors to the data plane's: each becomes a
:class:`~.connect.ConnectError` whose code envd would have answered (a
guest's error by its kind, a service error by its status); anything else is
``internal``.
"""

from __future__ import annotations

from ..errors import AgentError, GuestErrorKind, ServiceError
from .connect import Code, ConnectError

#: The code of each kind of a guest's errors (the others are ``internal``).
GUEST_CODES: dict[GuestErrorKind, Code] = {
    GuestErrorKind.UNAVAILABLE: Code.UNAVAILABLE,
    GuestErrorKind.UNSUPPORTED: Code.UNIMPLEMENTED,
    GuestErrorKind.OVER_BUDGET: Code.RESOURCE_EXHAUSTED,
    GuestErrorKind.TOO_LARGE: Code.RESOURCE_EXHAUSTED,
    GuestErrorKind.REJECTED: Code.INVALID_ARGUMENT,
    GuestErrorKind.NOT_FOUND: Code.NOT_FOUND,
    GuestErrorKind.MISSING_DESTINATION: Code.NOT_FOUND,
    GuestErrorKind.NOT_A_DIRECTORY: Code.INVALID_ARGUMENT,
    GuestErrorKind.IS_A_DIRECTORY: Code.INVALID_ARGUMENT,
    GuestErrorKind.NOT_EMPTY: Code.FAILED_PRECONDITION,
    GuestErrorKind.EXISTS: Code.ALREADY_EXISTS,
    GuestErrorKind.BUSY: Code.FAILED_PRECONDITION,
    GuestErrorKind.PERMISSION_DENIED: Code.PERMISSION_DENIED,
    GuestErrorKind.INVALID: Code.INVALID_ARGUMENT,
    GuestErrorKind.UNSAFE_ENTRY: Code.INVALID_ARGUMENT,
    GuestErrorKind.UNSUPPORTED_ENTRY: Code.INVALID_ARGUMENT,
    GuestErrorKind.NO_SPACE: Code.RESOURCE_EXHAUSTED,
    GuestErrorKind.GONE: Code.NOT_FOUND,
}

#: The code of each status of a service error (the others are ``internal``).
STATUS_CODES: dict[int, Code] = {
    400: Code.INVALID_ARGUMENT, 401: Code.UNAUTHENTICATED, 403: Code.PERMISSION_DENIED, 404: Code.NOT_FOUND,
    409: Code.ALREADY_EXISTS, 413: Code.RESOURCE_EXHAUSTED, 429: Code.RESOURCE_EXHAUSTED, 501: Code.UNIMPLEMENTED,
    503: Code.UNAVAILABLE, 504: Code.DEADLINE_EXCEEDED,
}


def connect_error_of(error: BaseException) -> ConnectError:
    """The Connect error that answers ``error``."""
    if isinstance(error, ConnectError):
        return error
    if isinstance(error, AgentError):
        return ConnectError(GUEST_CODES.get(error.kind, Code.INTERNAL), str(error.message))
    if isinstance(error, ServiceError):
        return ConnectError(STATUS_CODES.get(error.status, Code.INTERNAL), error.message)
    return ConnectError(Code.INTERNAL, "internal error")


__all__ = ["GUEST_CODES", "STATUS_CODES", "connect_error_of"]
