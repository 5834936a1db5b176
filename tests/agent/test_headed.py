# -*- test-case-name: tests.agent.test_headed -*-
"""
:mod:`vmservice.agent.headed`: a stream's head, cut anywhere, then its body,
told to a recording receiver.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.agent.fakes import FakeStream
from vmservice.agent.headed import HeadedProtocol
from vmservice.agent.stream import AgentStream
from vmservice.wire.payloads import encode_head


class Receiver:
    """Records what it is told."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def connected(self, stream: AgentStream) -> None:
        self.events.append(("connected", stream))

    def head_malformed(self, error: ValueError) -> None:
        self.events.append(("malformed",))

    def headed(self, head: dict[str, Any], rest: bytes) -> None:
        self.events.append(("headed", head, rest))

    def body(self, data: bytes) -> None:
        self.events.append(("body", data))

    def read_ended(self) -> None:
        self.events.append(("read_ended",))

    def ended(self, reason: Failure) -> None:
        self.events.append(("ended", reason.type))


class HeadedProtocolTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.receiver = Receiver()
        self.stream = FakeStream({}, HeadedProtocol(self.receiver))
        self.stream.protocol.makeConnection(self.stream)  # type: ignore[arg-type]

    def test_head_cut_anywhere(self) -> None:
        """The stream is told first; a head that arrives a byte at a time is told once whole, then the body."""
        wire = encode_head({"ok": True}) + b"ab"
        for i in range(len(wire) - 1):
            self.stream.deliver(wire[i:i + 1])
        self.stream.deliver(wire[-1:], b"cd")
        self.stream.protocol.readConnectionLost()  # type: ignore[attr-defined]
        self.stream.end()
        self.assertEqual(self.receiver.events, [("connected", self.stream), ("headed", {"ok": True}, b""),
                                                ("body", b"a"), ("body", b"bcd"), ("read_ended",),
                                                ("ended", ConnectionDone)])

    def test_rest(self) -> None:
        """What follows the head in the same data comes with it."""
        self.stream.deliver(encode_head({"ok": 1}) + b"rest")
        self.assertEqual(self.receiver.events[1:], [("headed", {"ok": 1}, b"rest")])

    def test_malformed(self) -> None:
        """A head that is no JSON object is told once; nothing more is read."""
        self.stream.deliver(b"\x00\x00\x00\x02[]")
        self.stream.deliver(b"more")
        self.assertEqual(self.receiver.events[1:], [("malformed",)])

    def test_ended_before_head(self) -> None:
        """An end before the head is told as it is."""
        self.stream.deliver(b"\x00\x00")
        self.stream.end()
        self.assertEqual(self.receiver.events[1:], [("ended", ConnectionDone)])
