# -*- test-case-name: tests.agent.test_background -*-
"""
Tests for :mod:`vmservice.agent.background`; the routes over it are tested in
:mod:`tests.api.test_background`.
"""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from tests.agent.background_info import INFO
from tests.agent.fakes import FakeExecAgent
from vmservice.agent.background import AgentBackground, parse_info
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.background import BackgroundInfo, IBackgroundExecs, ILogSink, LogFrame
from vmservice.wire.logframes import STDOUT, encode_frame
from vmservice.wire.logframes import LogFrame as WireFrame
from vmservice.wire.payloads import encode_head


@implementer(ILogSink)
class Sink:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def opened(self, info: BackgroundInfo) -> None:
        self.events.append(("opened", info.exec_id))

    def frame(self, frame: LogFrame) -> None:
        self.events.append(("frame", frame.kind, frame.id, frame.data))

    def ended(self) -> None:
        self.events.append(("ended",))

    def lost(self, error: AgentError) -> None:
        self.events.append(("lost", error.kind))


class AgentBackgroundTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.agent = FakeExecAgent()
        self.background = AgentBackground(self.agent)

    def test_interface(self) -> None:
        self.assertTrue(verifyObject(IBackgroundExecs, self.background))
        self.assertIsInstance(self.agent.background, AgentBackground)

    def test_parse_info(self) -> None:
        info = parse_info(INFO)
        self.assertEqual((info.exec_id, info.args, info.exit_code), (INFO["exec_id"], ("a",), None))
        for broken in ({**INFO, "running": 1}, {**INFO, "args": [1]}, {**INFO, "exit_code": "0"}, [], None):
            error = self.assertRaises(AgentError, parse_info, broken)
            self.assertEqual(error.kind, GuestErrorKind.MALFORMED)

    def test_logs_in_pieces(self) -> None:
        """The head and frames may arrive cut anywhere."""
        sink = Sink()
        self.background.logs("ex_1", 0, False, sink)
        stream = self.agent.streams[0]
        wire = encode_head({"ok": True, "result": INFO}) + encode_frame(WireFrame(STDOUT, 1, 5, b"abc"))
        for i in range(len(wire)):
            stream.deliver(wire[i:i + 1])
        stream.end()
        self.assertEqual(sink.events, [("opened", INFO["exec_id"]), ("frame", "stdout", 1, b"abc"), ("ended",)])

    def test_truncated(self) -> None:
        """A stream that ends inside a frame, or before its head, is lost, not ended."""
        for wire in (encode_head({"ok": True, "result": INFO}) + encode_frame(WireFrame(STDOUT, 1, 5, b"abc"))[:-1],
                     b"\x00\x00"):
            sink = Sink()
            self.background.logs("ex_1", 0, False, sink)
            stream = self.agent.streams[-1]
            stream.deliver(wire)
            stream.end()
            self.assertEqual(sink.events[-1][0], "lost")

    def test_bad_head(self) -> None:
        """A head that is not JSON resets the stream."""
        sink = Sink()
        self.background.logs("ex_1", 0, False, sink)
        stream = self.agent.streams[0]
        stream.deliver(b"\x00\x00\x00\x02[}")
        self.assertEqual(sink.events, [("lost", GuestErrorKind.MALFORMED)])
        self.assertIsNotNone(stream.aborted)
