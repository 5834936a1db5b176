# -*- test-case-name: tests.errors -*-
"""
The error vocabulary of vmservice and its single mapping to HTTP.

Domain code raises :class:`ServiceError` subclasses
(:mod:`~vmservice.errors.service`); the code that talks to a guest agent
raises :class:`AgentError` with a :class:`GuestErrorKind`, and
:data:`GUEST_ERRORS` is the one table that says which service error each kind
is (:mod:`~vmservice.errors.guest`).  Only :func:`http_error`
(:mod:`~vmservice.errors.http`, called by the API's error renderer) turns
either into a status code and an ErrorResponse body.  Every error carries a
stable snake_case ``code`` that clients may match on.  :func:`no_room`
(:mod:`~vmservice.errors.no_room`) tells a full file system's error.
"""

from .guest import GUEST_ERRORS, AgentError, GuestErrorKind, service_error
from .http import http_error
from .no_room import NO_ROOM_ERRNOS, NO_ROOM_WORDS, no_room
from .service import (
    AgentNotConnected,
    BadGateway,
    BadRequest,
    BodyTooLarge,
    BufferBudgetExhausted,
    Conflict,
    ConnectionLimitReached,
    Forbidden,
    ForbiddenOrigin,
    GatewayTimeout,
    Gone,
    InsufficientMemory,
    InsufficientStorage,
    Internal,
    MethodNotAllowed,
    MisdirectedRequest,
    NotFound,
    NotSupported,
    Protected,
    ServiceError,
    StateDirFull,
    TooManyConnections,
    Unauthorized,
    WaitTimeout,
)

__all__ = [
    "GUEST_ERRORS",
    "NO_ROOM_ERRNOS",
    "NO_ROOM_WORDS",
    "AgentError",
    "AgentNotConnected",
    "BadGateway",
    "BadRequest",
    "BodyTooLarge",
    "BufferBudgetExhausted",
    "Conflict",
    "ConnectionLimitReached",
    "Forbidden",
    "ForbiddenOrigin",
    "GatewayTimeout",
    "Gone",
    "GuestErrorKind",
    "InsufficientMemory",
    "InsufficientStorage",
    "Internal",
    "MethodNotAllowed",
    "MisdirectedRequest",
    "NotFound",
    "NotSupported",
    "Protected",
    "ServiceError",
    "StateDirFull",
    "TooManyConnections",
    "Unauthorized",
    "WaitTimeout",
    "http_error",
    "no_room",
    "service_error",
]
