# -*- test-case-name: tests.client.test_bodies -*-
"""
Tests for :mod:`vmservice.client.bodies`: which producer a request body's source gets.
"""

from __future__ import annotations

import os

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.pipes import Pipes
from vmservice.client.bodies import FdBodyProducer, body_producer


class BodyProducerTests(Pipes, SynchronousTestCase):
    """:func:`body_producer` on a real pipe and files, with a reactor that is never run."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()

    def test_body_producer_choice(self) -> None:
        """A pipe gets an FdBodyProducer; a regular file or BytesIO a producer of known length."""
        import io

        read_end, _ = self.pipe()
        self.assertIsInstance(body_producer(self.reactor, os.fdopen(read_end, "rb", closefd=False)), FdBodyProducer)
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"12345")
        with open(path, "rb") as f:
            self.assertEqual(body_producer(self.reactor, f).length, 5)
        self.assertEqual(body_producer(self.reactor, io.BytesIO(b"abc")).length, 3)
