"""
Tests for :mod:`vmservice.nodes.background_limit`: a node's starts counted
against the guest's list one at a time, refused at the bound, the per-node
turn given back on every way out.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.trial.unittest import SynchronousTestCase

from vmservice.config import MAX_BACKGROUND_EXECS_PER_NODE
from vmservice.errors import Conflict, http_error
from vmservice.guestport.background import BackgroundRequest
from vmservice.nodes.background_limit import BackgroundLimit
from vmservice.guestport.exec import ExecRequest

REQUEST = BackgroundRequest(ExecRequest(cmd="sleep 9"), 1024)


class _Execs:
    """A guest's background execs whose list and start answers the test gives."""

    def __init__(self) -> None:
        self.lists: list[Deferred[list[Any]]] = []
        self.starts: list[Deferred[Any]] = []

    def listing(self) -> Deferred[list[Any]]:
        self.lists.append(Deferred())
        return self.lists[-1]

    def start(self, request: BackgroundRequest) -> Deferred[Any]:
        self.starts.append(Deferred())
        return self.starts[-1]


class BackgroundLimitTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.limit = BackgroundLimit(2)
        self.execs = _Execs()

    def start(self, hostname: str = "demo-1") -> Deferred[Any]:
        return Deferred.fromCoroutine(self.limit.start(hostname, self.execs, REQUEST))  # type: ignore[arg-type]

    def test_within(self) -> None:
        """Below the bound the start goes to the guest, after its list was read."""
        started = self.start()
        self.assertEqual(self.execs.starts, [])
        self.execs.lists[0].callback(["one"])
        self.execs.starts[0].callback("info")
        self.assertEqual(self.successResultOf(started), "info")
        self.assertEqual(self.limit._locks, {})

    def test_refused_at_the_bound(self) -> None:
        """At the bound the start is 409 background_limit_reached and the guest is not asked to start."""
        started = self.start()
        self.execs.lists[0].callback(["one", "two"])
        error = self.failureResultOf(started, Conflict).value
        self.assertEqual(http_error(error)[0], 409)
        self.assertEqual(error.code, "background_limit_reached")
        self.assertEqual(self.execs.starts, [])
        self.assertEqual(self.limit._locks, {})

    def test_one_start_of_a_node_at_a_time(self) -> None:
        """
        A second start of the node waits until the first one answered, then
        reads the list afresh: two starts at once cannot both take the last place.
        Another node's start does not wait.
        """
        first, second = self.start(), self.start()
        other = self.start("demo-2")
        self.assertEqual(len(self.execs.lists), 2)  # demo-1's first, and demo-2's
        self.execs.lists[0].callback(["one"])
        self.execs.starts[0].callback("first")
        self.assertEqual(self.successResultOf(first), "first")
        self.assertEqual(len(self.execs.lists), 3)
        self.execs.lists[2].callback(["one", "first"])
        self.failureResultOf(second, Conflict)
        self.assertNoResult(other)
        self.execs.lists[1].callback([])
        self.execs.starts[1].callback("other")
        self.assertEqual(self.successResultOf(other), "other")
        self.assertEqual(self.limit._locks, {})

    def test_turn_given_back_on_failure_and_cancel(self) -> None:
        """A list that fails, and a start cancelled while it waits or runs, give the node's turn back."""
        failed, queued = self.start(), self.start()
        self.execs.lists[0].errback(RuntimeError("agent lost"))
        self.failureResultOf(failed, RuntimeError)
        self.assertEqual(len(self.execs.lists), 2)  # queued has the turn
        waiting = self.start()
        waiting.cancel()
        self.failureResultOf(waiting, CancelledError)
        self.execs.lists[1].callback([])
        self.assertEqual(len(self.execs.starts), 1)
        queued.cancel()
        self.failureResultOf(queued, CancelledError)
        self.assertEqual(self.limit._locks, {})
        last = self.start()
        self.execs.lists[2].callback([])
        self.execs.starts[1].callback("done")
        self.assertEqual(self.successResultOf(last), "done")
        self.assertEqual(self.limit._locks, {})

    def test_bounds(self) -> None:
        """The configured bound may not exceed the guest agent's own registry bound."""
        from vmservice.guest import background

        self.assertEqual(MAX_BACKGROUND_EXECS_PER_NODE, background.MAX_EXECS)
