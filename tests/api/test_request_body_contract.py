# -*- test-case-name: tests.api.test_request_body_contract -*-
"""
Random orders of a streamed request body's inputs
(:class:`vmservice.api.request_body.RequestBody`) against its documented
contract (``docs/state-machines/request-body.md``): what is counted, what the
consumer gets and when its delivery fires, and when the network is held.
"""

from __future__ import annotations

from typing import Any, Optional

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from vmservice.api.request_body import RequestBody

#: The body's high water in these runs.
HIGH_WATER = 4


class BodyContract(RuleBasedStateMachine):
    """One body, and what its contract says it has done so far."""

    def __init__(self) -> None:
        super().__init__()
        self.network: list[str] = []
        self.body = RequestBody(lambda: self.network.append("pause"), lambda: self.network.append("resume"),
                                high_water=HIGH_WATER)
        self.counted = bytearray()
        self.written = bytearray()
        self.ended = self.lost = self.stopped = self.claimed = self.paused = False
        self.outcome: Optional[Any] = None
        self.expected: Optional[Any] = None

    def _record(self, d: Deferred[int]) -> None:
        d.addCallbacks(lambda n: setattr(self, "outcome", ("done", n)),
                       lambda f: setattr(self, "outcome", ("failed", f.type)))

    @property
    def arriving(self) -> bool:
        return not (self.ended or self.lost or self.stopped)

    @rule(data=st.binary(max_size=6))
    def feed(self, data: bytes) -> None:
        self.body.feed(data)
        if not (self.ended or self.lost):
            self.counted += data  # counted while discarding too

    @rule()
    def end(self) -> None:
        self.body.end()
        self.ended = self.ended or not self.lost

    @rule()
    def fail(self) -> None:
        self.body.fail(Failure(ConnectionLost()))
        if not (self.ended or self.stopped):
            self.lost = True
            if self.claimed and self.expected is None:
                self.expected = ("failed", ConnectionLost)

    @precondition(lambda self: not (self.claimed or self.stopped))
    @rule()
    def claim(self) -> None:
        self.claimed = True
        self._record(self.body.deliver_to(self.written.extend))
        if self.lost:
            self.expected = ("failed", ConnectionLost)

    @rule()
    def pause(self) -> None:
        self.body.pauseProducing()
        self.paused = not self.stopped

    @rule()
    def resume(self) -> None:
        self.body.resumeProducing()
        self.paused = False

    @rule()
    def stop(self) -> None:
        self.body.stopProducing()
        self.stopped = True
        if self.claimed and self.expected is None:
            self.expected = ("done", len(self.counted))

    @invariant()
    def counts_what_came(self) -> None:
        assert (self.body.received, self.body.complete) == (len(self.counted), self.ended)

    @invariant()
    def writes_in_order(self) -> None:
        assert bytes(self.counted).startswith(bytes(self.written))
        if self.claimed and self.arriving and not self.paused:
            assert self.written == self.counted, "a flowing consumer takes every chunk at once"

    @invariant()
    def delivers_once_all_written(self) -> None:
        if (self.claimed and self.ended and self.expected is None and not self.lost
                and len(self.written) == len(self.counted)):
            self.expected = ("done", len(self.counted))
        assert self.outcome == self.expected

    @invariant()
    def holds_the_network(self) -> None:
        held = bool(self.network) and self.network[-1] == "pause"
        if self.ended or self.stopped:
            assert not held, "released once the body came or its consumer went"
        elif self.arriving:
            waiting = len(self.counted) - len(self.written)
            assert held == (waiting > 0 if self.paused else waiting >= HIGH_WATER), (waiting, self.paused)


class ContractTests(SynchronousTestCase):
    def test_contract(self) -> None:
        """Random orders of feed, end, fail, claim, pause, resume and stop keep the body's contract."""
        BodyContract.TestCase.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
        BodyContract.TestCase("runTest").runTest()
