"""
The host's end of a shell stream (:mod:`vmservice.agent.shell`) over a fake
stream: the OPEN header, frame decoding into sink calls, input, resize,
flow control and hang-up.
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from tests.agent.fakes import FakeExecAgent
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.shell import IShellSession, ShellRequest
from vmservice.wire import ResetCode
from vmservice.wire.shellframes import (
    DATA,
    EXIT,
    MAX_DATA,
    REJECTED,
    STARTED,
    FrameDecoder,
    encode_frame,
    encode_json_frame,
    encode_window_size,
)


class Sink:
    """Records the sink calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def started(self, pid: int) -> None:
        self.calls.append(("started", pid))

    def output(self, data: bytes) -> None:
        self.calls.append(("output", data))

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        self.calls.append(("exited", exit_code, signal))

    def lost(self, error: AgentError) -> None:
        self.calls.append(("lost", error.kind))


class ShellStreamTests(SynchronousTestCase):
    """:meth:`AgentGuest.shell` and the frame decoding."""

    def setUp(self) -> None:
        self.agent = FakeExecAgent()
        self.sink = Sink()
        self.session = self.agent.shell(ShellRequest(uid=1000, gid=100, shell="/bin/sh", cwd="/tmp", cols=100, rows=30),
                                        self.sink)
        [self.stream] = self.agent.streams

    def test_header(self) -> None:
        """The OPEN header carries the request; the session provides IShellSession."""
        self.assertEqual(self.stream.header, {"op": "shell", "uid": 1000, "gid": 100, "shell": "/bin/sh", "cwd": "/tmp",
                                              "cols": 100, "rows": 30})
        self.assertTrue(verifyObject(IShellSession, self.session))

    def test_frames_to_sink(self) -> None:
        """STARTED, DATA and EXIT become sink calls, in order; the frames may be split anywhere."""
        data = (encode_json_frame(STARTED, {"pid": 7}) + encode_frame(DATA, b"$ ")
                + encode_json_frame(EXIT, {"exit_code": 0, "signal": None}))
        for i in range(len(data)):
            self.stream.deliver(data[i:i + 1])
        self.assertEqual(self.sink.calls, [("started", 7), ("output", b"$ "), ("exited", 0, None)])
        self.stream.end()
        self.assertEqual(len(self.sink.calls), 3)

    def test_rejected(self) -> None:
        """REJECTED is lost with kind REJECTED."""
        self.stream.deliver(encode_json_frame(REJECTED, {"message": "no cwd"}))
        self.assertEqual(self.sink.calls, [("lost", GuestErrorKind.REJECTED)])

    def test_bad_frame(self) -> None:
        """A malformed frame resets the stream and loses the shell as MALFORMED."""
        self.stream.deliver(encode_frame(STARTED, b"[]"))
        self.assertEqual(self.sink.calls, [("lost", GuestErrorKind.MALFORMED)])
        self.assertEqual(self.stream.aborted, (ResetCode.PROTOCOL_ERROR, "bad shell frame"))

    def test_early_end(self) -> None:
        """A stream that ends without EXIT loses the shell."""
        self.stream.deliver(encode_json_frame(STARTED, {"pid": 7}))
        self.stream.end()
        self.assertEqual(self.sink.calls[-1][0], "lost")

    def test_input_and_resize(self) -> None:
        """Input becomes DATA frames of at most MAX_DATA bytes; resize a WINDOW_SIZE frame."""
        self.session.write(b"x" * (MAX_DATA + 1))
        self.session.resize(120, 40)
        frames = list(FrameDecoder().feed(bytes(self.stream.written)))
        self.assertEqual([(f.kind, len(f.payload)) for f in frames], [(DATA, MAX_DATA), (DATA, 1), (2, 8)])
        self.assertTrue(bytes(self.stream.written).endswith(encode_window_size(120, 40)))

    def test_flow_and_hangup(self) -> None:
        """Pausing pauses the stream; an input producer is registered on it; stopProducing hangs up."""
        self.session.pauseProducing()
        self.assertTrue(self.stream.paused)
        self.session.resumeProducing()
        self.assertFalse(self.stream.paused)
        producer = object()
        self.session.register_input_producer(producer)  # type: ignore[arg-type]
        self.assertIs(self.stream.producer, producer)
        self.session.unregister_input_producer()
        self.assertIsNone(self.stream.producer)
        self.session.stopProducing()
        self.assertEqual(self.stream.aborted, (ResetCode.CANCEL, "shell hung up"))
        self.assertEqual(self.sink.calls[-1][0], "lost")
