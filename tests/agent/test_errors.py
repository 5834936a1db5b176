"""Tests for :mod:`vmservice.agent.errors`: what the end of a stream means."""

from __future__ import annotations

from twisted.internet.error import ConnectionAborted, ConnectionDone, ConnectionLost
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from vmservice.agent.errors import AgentRequestFailed, AgentUnavailable, stream_error
from vmservice.agent.protocol import ChannelNotReady
from vmservice.agent.stream import StreamReset
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.wire import ResetCode


class StreamErrorTests(SynchronousTestCase):
    def kind(self, error: BaseException) -> GuestErrorKind:
        return stream_error(Failure(error), "the copy").kind

    def test_lost_channel_is_unavailable(self) -> None:
        """A lost or closed channel, or one not ready, means the agent is unavailable (a retry may work)."""
        for error in (ConnectionLost(), ConnectionDone(), ConnectionAborted(), ChannelNotReady("no")):
            self.assertIs(self.kind(error), GuestErrorKind.UNAVAILABLE, error)

    def test_resets(self) -> None:
        """An agent that restarted is unavailable; an unknown op unsupported; another reset a failure."""
        self.assertIs(self.kind(StreamReset(ResetCode.PEER_RESTARTED, "")), GuestErrorKind.UNAVAILABLE)
        self.assertIs(self.kind(StreamReset(ResetCode.UNKNOWN_OP, "")), GuestErrorKind.UNSUPPORTED)
        error = stream_error(Failure(StreamReset(ResetCode.INTERNAL_ERROR, "disk")), "the copy")
        self.assertIsInstance(error, AgentRequestFailed)
        self.assertEqual((error.kind, error.code), (GuestErrorKind.FAILED, ResetCode.INTERNAL_ERROR))
        self.assertIn("the copy", str(error))

    def test_agent_errors_pass(self) -> None:
        """An agent error already said is kept as it is; anything else is a failure."""
        given = AgentError(GuestErrorKind.NOT_FOUND, "gone")
        self.assertIs(stream_error(Failure(given), "x"), given)
        self.assertIs(self.kind(ValueError("odd")), GuestErrorKind.FAILED)

    def test_request_failed_kinds(self) -> None:
        """A refused request's kind comes from its reset code, or from what was wrong with the answer."""
        self.assertIs(AgentRequestFailed("m").kind, GuestErrorKind.MALFORMED)
        self.assertIs(AgentRequestFailed("m", ResetCode.UNKNOWN_OP).kind, GuestErrorKind.UNSUPPORTED)
        self.assertIs(AgentRequestFailed("m", kind=GuestErrorKind.TOO_LARGE).kind, GuestErrorKind.TOO_LARGE)
        self.assertIs(AgentUnavailable("m").kind, GuestErrorKind.UNAVAILABLE)
