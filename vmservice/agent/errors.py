# -*- test-case-name: tests.agent.test_errors -*-
"""
The errors of the agent code: :class:`~vmservice.errors.AgentError`\\ s only,
never HTTP-shaped ones.

:func:`stream_error` is the one place that says what the end of a stream
without an answer means (a reset by the guest, a lost connection, an agent
that restarted); :data:`vmservice.errors.GUEST_ERRORS` says what each kind
means for a client.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.python.failure import Failure

from ..errors import AgentError, GuestErrorKind
from ..wire import ResetCode
from .protocol import ChannelNotReady
from .stream import StreamReset


class AgentUnavailable(AgentError):
    """
    The agent cannot be reached now: not connected yet, the connection or the
    agent's session was lost during the request, or the client was stopped.
    """

    def __init__(self, message: str) -> None:
        super().__init__(GuestErrorKind.UNAVAILABLE, message)


def _kind_of_reset(code: int | None) -> GuestErrorKind:
    if code is None:
        return GuestErrorKind.MALFORMED
    if code == ResetCode.UNKNOWN_OP:
        return GuestErrorKind.UNSUPPORTED
    return GuestErrorKind.FAILED


class AgentRequestFailed(AgentError):
    """
    The agent refused or failed a request (a stream reset by the agent), or
    answered something that does not parse or is too large.

    :ivar code: the reset code, or ``None`` for an answer that was refused here.
    """

    def __init__(self, message: str, code: int | None = None, kind: GuestErrorKind | None = None) -> None:
        super().__init__(kind if kind is not None else _kind_of_reset(code), message)
        self.code = code


def stream_error(reason: Failure, what: str) -> AgentError:
    """
    What the end of a stream before its answer means.

    :param reason: what the stream was lost with.
    :param what: the operation, for the message ("the copy", "the exec stream").
    """
    error = reason.value
    if isinstance(error, AgentError):
        return error
    if isinstance(error, StreamReset):
        if error.code == ResetCode.PEER_RESTARTED:
            return AgentUnavailable(f"the agent restarted during {what}")
        if error.code == ResetCode.UNKNOWN_OP:
            return AgentRequestFailed(f"the guest agent cannot do {what} (its image is older)", error.code)
        return AgentRequestFailed(f"the guest failed {what}: {error}", error.code)
    if isinstance(error, (ConnectionLost, ConnectionDone, ChannelNotReady)):
        return AgentUnavailable(f"the agent lost {what}: {reason.getErrorMessage()}")
    return AgentRequestFailed(f"{what} failed: {reason.getErrorMessage()}", kind=GuestErrorKind.FAILED)


__all__ = ["AgentRequestFailed", "AgentUnavailable", "stream_error"]
