"""
Tests of :mod:`vmservice.e2b.inflating`: a gzip body inflated in bounded
slices, only while its consumer takes them, and its errors.
"""

from __future__ import annotations

import gzip

from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from twisted.internet.interfaces import IPushProducer

from vmservice.e2b.inflating import SLICE, BadGzip, Inflater


@implementer(IPushProducer)
class Upstream:
    def __init__(self) -> None:
        self.paused = self.stopped = False

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False

    def stopProducing(self) -> None:
        self.stopped = True


class InflaterTests(SynchronousTestCase):
    def test_bomb_in_slices_while_resumed(self) -> None:
        upstream, written = Upstream(), []
        inflater: Inflater

        def write(data: bytes) -> None:
            written.append(len(data))
            if len(written) % 3 == 0:
                inflater.pauseProducing()

        inflater = Inflater(upstream, write)
        bomb = gzip.compress(b"\0" * (20 * SLICE))
        inflater.feed(bomb)
        self.assertEqual(written, [SLICE] * 3)
        self.assertTrue(upstream.paused)
        done = inflater.end()
        self.assertNoResult(done)
        while not done.called:
            inflater.resumeProducing()
        self.assertEqual(sum(written), 20 * SLICE)
        self.assertLessEqual(max(written), SLICE)
        self.assertFalse(upstream.paused)

    def test_chunked(self) -> None:
        out = bytearray()
        inflater = Inflater(Upstream(), out.extend)
        body = gzip.compress(bytes(range(256)) * 100)
        for start in range(0, len(body), 7):
            inflater.feed(body[start:start + 7])
        self.successResultOf(inflater.end())
        self.assertEqual(bytes(out), bytes(range(256)) * 100)

    def test_not_gzip(self) -> None:
        inflater = Inflater(Upstream(), lambda data: None)
        self.assertRaises(BadGzip, inflater.feed, b"plain text")
        self.failureResultOf(inflater.end(), BadGzip)

    def test_cut_short(self) -> None:
        inflater = Inflater(Upstream(), lambda data: None)
        inflater.feed(gzip.compress(b"x" * 1000)[:-6])
        self.failureResultOf(inflater.end(), BadGzip)
