# -*- test-case-name: tests.api.test_shell_bridge -*-
"""Tests for :mod:`vmservice.api.shell_bridge`: the orders in which a shell and its socket meet."""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IConsumer
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.api.shell_bridge import BRIDGE_MACHINE, LOST_CLOSE_CODE, ShellBridge
from vmservice.errors import AgentError, GuestErrorKind


class FakeSession:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pauseProducing(self) -> None:
        self.calls.append("pause")

    def resumeProducing(self) -> None:
        self.calls.append("resume")

    def register_input_producer(self, producer: Any) -> None:
        self.calls.append("input producer")

    def unregister_input_producer(self) -> None:
        self.calls.append("no input producer")

    def hangup(self) -> None:
        self.calls.append("hangup")


@implementer(IConsumer)
class FakeTransport:
    def __init__(self) -> None:
        self.producer: Any = None

    def write(self, data: bytes) -> None:
        pass

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None


class FakeSocket:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed: Any = None
        self.transport = FakeTransport()

    def send_output(self, data: bytes) -> None:
        self.sent.append(data)

    def close_session(self, code: int, reason: str) -> None:
        self.closed = code


class ShellBridgeTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.bridge = ShellBridge()
        self.session = FakeSession()
        self.bridge.session = self.session  # type: ignore[assignment]
        self.socket = FakeSocket()

    def test_diagram(self) -> None:
        """docs/state-machines/shell-bridge.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("shell-bridge.dot"), machine_transitions(BRIDGE_MACHINE))

    def test_output_held_until_the_socket_opens(self) -> None:
        """Output before the socket is held and delivered first; then it flows, and the exit closes with 1000."""
        self.bridge.started(7)
        self.successResultOf(self.bridge.ready)
        self.bridge.output(b"prompt$ ")
        self.assertEqual(self.socket.sent, [])
        self.bridge.attach(self.socket)  # type: ignore[arg-type]
        self.bridge.output(b"more")
        self.assertEqual(self.socket.sent, [b"prompt$ ", b"more"])
        self.assertEqual(self.session.calls, ["pause", "input producer", "resume"])
        self.assertIsNotNone(self.socket.transport.producer)
        self.bridge.exited(0, None)
        self.assertEqual(self.socket.closed, 1000)
        self.bridge.detach()
        self.assertNotIn("hangup", self.session.calls)

    def test_refused(self) -> None:
        """A shell the guest refuses fails the route's wait; nothing else happens."""
        self.bridge.lost(AgentError(GuestErrorKind.REJECTED, "no such cwd"))
        self.failureResultOf(self.bridge.ready, AgentError)
        self.bridge.attach(self.socket)  # type: ignore[arg-type]
        self.assertEqual((self.socket.sent, self.socket.closed), ([], None))

    def test_ended_before_the_socket(self) -> None:
        """A shell over before the socket opens: the socket gets its output, then the close it was owed."""
        self.bridge.started(7)
        self.bridge.output(b"bye")
        self.bridge.lost(AgentError(GuestErrorKind.UNAVAILABLE, "agent gone"))
        self.bridge.attach(self.socket)  # type: ignore[arg-type]
        self.assertEqual((self.socket.sent, self.socket.closed), ([b"bye"], LOST_CLOSE_CODE))

    def test_client_goes_away(self) -> None:
        """The socket's close hangs the shell up, once."""
        self.bridge.started(7)
        self.bridge.attach(self.socket)  # type: ignore[arg-type]
        self.bridge.detach()
        self.bridge.detach()
        self.bridge.exited(129, "SIGHUP")
        self.assertEqual(self.session.calls.count("hangup"), 1)
        self.assertIsNone(self.socket.closed)
