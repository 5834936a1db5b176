"""
Tests for :mod:`vmservice.api.paced_body`: a whole body written in chunks at
the transport's pace, through a real HTTP/1.1 request on a ``StringTransport``.
"""

from __future__ import annotations

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.http import HTTPChannel, Request

from vmservice.api.paced_body import CHUNK, write_paced, write_within
from vmservice.buffer_budget import BufferBudget
from vmservice.errors import BufferBudgetExhausted


class _Transport(StringTransport):
    """
    A transport that, while :attr:`full`, pauses its producer at each write,
    as a socket's transport does while its buffer is over its size.
    """

    full = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.full and self.producer is not None:
            self.producer.pauseProducing()


class PacedBodyTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.transport = _Transport()
        self.channel = HTTPChannel()
        self.channel.makeConnection(self.transport)
        self.request = Request(self.channel, False)
        self.request.method, self.request.clientproto = b"POST", b"HTTP/1.1"
        self.body = bytes(range(256)) * (CHUNK // 256) * 3 + b"tail"
        self.addCleanup(self.channel.connectionLost, Failure(ConnectionLost()))

    def written(self) -> bytes:
        """What the response's body is so far (after its head)."""
        return self.transport.value().partition(b"\r\n\r\n")[2]

    def test_whole_body_with_length(self) -> None:
        """With nothing in the way the whole body goes out at once, with its Content-Length; then it unregisters."""
        done = write_paced(self.request, self.body)  # type: ignore[arg-type]
        self.successResultOf(done)
        self.assertIn(b"Content-Length: %d" % len(self.body), self.transport.value())
        self.assertEqual(self.written(), self.body)
        self.assertIsNone(self.request.producer)

    def test_full_transport_holds_the_rest(self) -> None:
        """
        While the transport is full not one more chunk is written after the one
        that found it full; each resume (the transport drained) writes on until done.
        """
        self.transport.full = True
        done = write_paced(self.request, self.body)  # type: ignore[arg-type]
        self.assertNoResult(done)
        self.assertEqual(len(self.written()), CHUNK)
        self.channel.resumeProducing()
        self.assertEqual(len(self.written()), 2 * CHUNK)
        self.transport.full = False
        self.channel.resumeProducing()
        self.successResultOf(done)
        self.assertEqual(self.written(), self.body)

    def test_client_gone(self) -> None:
        """
        The connection stopping the producer (it is being lost) stops the
        writing and lets go of the body; the wait is left to be cancelled by
        the request's end, which follows.
        """
        self.transport.full = True
        done = write_paced(self.request, self.body)  # type: ignore[arg-type]
        self.channel.stopProducing()
        self.assertNoResult(done)
        self.transport.full = False
        self.channel.resumeProducing()
        self.assertEqual(len(self.written()), CHUNK)
        self.assertNoResult(done)
        done.cancel()
        self.failureResultOf(done, CancelledError)

    def test_cancel(self) -> None:
        """Cancelling the wait (the handler cancelled) stops the writing and unregisters."""
        self.transport.full = True
        done = write_paced(self.request, self.body)  # type: ignore[arg-type]
        done.cancel()
        self.failureResultOf(done)
        self.assertIsNone(self.request.producer)
        self.transport.full = False
        self.channel.resumeProducing()
        self.assertEqual(len(self.written()), CHUNK)

    def test_within_the_budget(self) -> None:
        """write_within holds the answer's size until the last byte was written, then gives it back."""
        budget = BufferBudget(len(self.body))
        self.transport.full = True
        done = Deferred.fromCoroutine(write_within(self.request, self.body, budget, "a listing"))
        self.assertEqual(budget.held, len(self.body))
        self.transport.full = False
        self.channel.resumeProducing()
        self.assertEqual(self.successResultOf(done), b"")
        self.assertEqual((budget.held, self.written()), (0, self.body))

    def test_refused_or_cancelled(self) -> None:
        """
        No room: BufferBudgetExhausted naming the answer, and nothing written;
        a cancelled answer gives its share back.
        """
        budget = BufferBudget(len(self.body) - 1)
        done = Deferred.fromCoroutine(write_within(self.request, self.body, budget, "a listing"))
        self.assertIn("a listing", self.failureResultOf(done, BufferBudgetExhausted).value.message)
        self.assertEqual((budget.held, self.transport.value()), (0, b""))
        budget = BufferBudget(None)
        self.transport.full = True
        done = Deferred.fromCoroutine(write_within(self.request, self.body, budget, "a listing"))
        done.cancel()
        self.failureResultOf(done, CancelledError)
        self.assertEqual(budget.held, 0)
