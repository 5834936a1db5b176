# -*- test-case-name: tests.agent.test_watching -*-
"""
The host's end of a watch stream (:mod:`vmservice.agent.watching`) over a fake
stream: the OPEN header, the reply, events to the sink, the end, flow control,
cancellation and malformed messages.
"""

from __future__ import annotations

from typing import Any, Optional

from twisted.internet.defer import CancelledError
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from tests.agent.fakes import FakeExecAgent
from vmservice.agent.stream import StreamReset
from vmservice.agent.watching import MAX_WATCH_HEADER, start_watch
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.watch import IWatch, IWatchSink, WatchEvent, WatchRequest
from vmservice.wire import ResetCode
from vmservice.wire.messages import encode_message

OK = encode_message({"ok": True, "result": {"paths": ["/srv"], "watches": 3}})


@implementer(IWatchSink)
class Sink:
    """Records the sink calls."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.ends: list[Optional[GuestErrorKind]] = []

    def event(self, event: WatchEvent) -> None:
        self.events.append(event)

    def ended(self, error: Optional[AgentError]) -> None:
        self.ends.append(error.kind if error is not None else None)


class WatchStreamTests(SynchronousTestCase):
    """:func:`start_watch` and the decoding of the guest's messages."""

    def setUp(self) -> None:
        self.agent = FakeExecAgent()
        self.sink = Sink()

    def start(self, **fields: Any) -> Any:
        watch = start_watch(self.agent, WatchRequest(paths=("/srv",), **fields), self.sink)
        return watch, self.agent.streams[-1]

    def test_header(self) -> None:
        """The OPEN header carries every field of the request; the host half-closes at once."""
        watch, stream = self.start(patterns=("*.py",), events=("create", "write"), recursive=True, debounce=0.5,
                                   uid=1000)
        self.assertEqual(stream.header, {"op": "watch", "paths": ["/srv"], "patterns": ["*.py"],
                                         "events": ["create", "write"], "recursive": True, "debounce": 0.5,
                                         "uid": 1000})
        self.assertTrue(stream.half_closed)
        verifyObject(IWatch, watch)
        verifyObject(IWatchSink, self.sink)

    def test_too_large(self) -> None:
        """A header too large for one frame is refused as INVALID before any stream opens."""
        with self.assertRaises(AgentError) as caught:
            start_watch(self.agent, WatchRequest(paths=("/" + "x" * MAX_WATCH_HEADER,)), self.sink)
        self.assertIs(caught.exception.kind, GuestErrorKind.INVALID)
        self.assertEqual(self.agent.streams, [])

    def test_ready_then_events_then_end(self) -> None:
        """The reply fires ready; events (split anywhere) go to the sink in order; a clean end ends it."""
        watch, stream = self.start()
        self.assertNoResult(watch.ready)
        data = OK + encode_message({"type": "create", "path": "/srv/a", "size": 3, "is_dir": False}) + encode_message(
            {"type": "overflow", "path": "", "size": 0, "is_dir": False, "message": "lost"})
        for index in range(len(data)):
            stream.deliver(data[index:index + 1])
        self.successResultOf(watch.ready)
        self.assertEqual(self.sink.events, [WatchEvent("create", "/srv/a", 3, False),
                                            WatchEvent("overflow", "", 0, False, "lost")])
        stream.end()
        self.assertEqual(self.sink.ends, [None])

    def test_refused(self) -> None:
        """The guest's error reply fails ready with the kind it names; the sink hears nothing."""
        watch, stream = self.start()
        stream.deliver(encode_message({"ok": False, "error": "not_found", "message": "/srv: No such file"}))
        stream.end()
        failure = self.failureResultOf(watch.ready, AgentError)
        self.assertEqual((failure.value.kind, failure.value.message), (GuestErrorKind.NOT_FOUND, "/srv: No such file"))
        self.assertEqual((self.sink.events, self.sink.ends), ([], []))

    def test_lost_before_ready(self) -> None:
        """A stream lost before the reply fails ready (agent gone: UNAVAILABLE; no reply at all: MALFORMED)."""
        watch, stream = self.start()
        stream.end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        self.assertIs(self.failureResultOf(watch.ready, AgentError).value.kind, GuestErrorKind.UNAVAILABLE)
        watch, stream = self.start()
        stream.end()
        self.assertIs(self.failureResultOf(watch.ready, AgentError).value.kind, GuestErrorKind.MALFORMED)
        watch, stream = self.start()
        stream.end(Failure(StreamReset(ResetCode.UNKNOWN_OP, "unknown op 'watch'")))
        self.assertIs(self.failureResultOf(watch.ready, AgentError).value.kind, GuestErrorKind.UNSUPPORTED)

    def test_lost_after_ready(self) -> None:
        """A stream lost after the reply ends the sink with the error."""
        watch, stream = self.start()
        stream.deliver(OK)
        stream.end(Failure(StreamReset(ResetCode.PEER_RESTARTED, "gone")))
        self.assertEqual(self.sink.ends, [GuestErrorKind.UNAVAILABLE])

    def test_malformed(self) -> None:
        """An event that is not one, or bytes that do not parse, reset the stream and end the sink as MALFORMED."""
        for bad in (encode_message({"type": "open", "path": "/x", "size": 0, "is_dir": False}),
                    encode_message({"type": "write", "path": "/x", "size": -1, "is_dir": False}),
                    encode_message({"type": "write", "path": "/x", "size": True, "is_dir": False}),
                    encode_message({"type": "write", "path": 3, "size": 0, "is_dir": False}),
                    encode_message({"type": "write", "path": "/x", "size": 0, "is_dir": False, "message": 1}),
                    b"\x00\x00\x00\x01[]"):
            self.sink = Sink()
            watch, stream = self.start()
            stream.deliver(OK)
            stream.deliver(bad)
            self.assertEqual(stream.aborted[0], ResetCode.PROTOCOL_ERROR, repr(bad))
            self.assertEqual((self.sink.events, self.sink.ends), ([], [GuestErrorKind.MALFORMED]), repr(bad))

    def test_malformed_reply(self) -> None:
        """A first message that is not a reply fails ready as MALFORMED."""
        watch, stream = self.start()
        stream.deliver(encode_message({"hello": 1}))
        self.assertIs(self.failureResultOf(watch.ready, AgentError).value.kind, GuestErrorKind.MALFORMED)

    def test_flow_control_and_cancel(self) -> None:
        """Pausing withholds credit; cancel resets the stream and the sink hears nothing more."""
        watch, stream = self.start()
        stream.deliver(OK)
        watch.pauseProducing()
        self.assertTrue(stream.paused)
        watch.resumeProducing()
        self.assertFalse(stream.paused)
        watch.stopProducing()
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)
        self.assertEqual(self.sink.ends, [])
        watch.cancel()

    def test_cancel_ready(self) -> None:
        """Cancelling ready (the client went away while the guest set up) resets the stream."""
        watch, stream = self.start()
        watch.ready.cancel()
        self.failureResultOf(watch.ready, CancelledError)
        self.assertEqual(stream.aborted[0], ResetCode.CANCEL)
        self.assertEqual(self.sink.ends, [])
