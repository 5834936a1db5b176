"""Tests for :mod:`vmservice.nodes.readiness`: waits raced against the VM's end and a timer."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeAgent, FakeMachine
from vmservice.errors import AgentNotConnected
from vmservice.hypervisors.base import MachineSpec
from vmservice.nodes.readiness import HEALTH_LIMIT, NotReady, bounded_health, wait_for_agent


def _machine() -> FakeMachine:
    spec = MachineSpec("a", 1, 1, "k", "i", "d", "agent.sock", "qmp.sock", "console.log")
    return FakeMachine(spec, 1)


class WaitForAgentTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.machine = _machine()
        self.agent = FakeAgent("agent.sock")

    def wait(self, timeout: float = 10.0) -> Deferred[None]:
        return Deferred.fromCoroutine(wait_for_agent(self.clock, self.machine, self.agent, timeout))

    def test_answered(self) -> None:
        """The wait ends at the agent's first health reply and leaves no timer behind."""
        d = self.wait()
        self.assertNoResult(d)
        self.agent.ready()
        self.successResultOf(d)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.agent._waiters, [])

    def test_timeout(self) -> None:
        """No answer within the timeout: NotReady without an exit, and the agent waiter is gone."""
        d = self.wait(5)
        self.clock.advance(5)
        error = self.failureResultOf(d, NotReady).value
        self.assertIsNone(error.ended)
        self.assertEqual(self.agent._waiters, [])

    def test_vm_ended(self) -> None:
        """The VM ending first: NotReady carrying how it ended; the timer is cancelled."""
        d = self.wait()
        self.machine.end(1, None, "boom")
        error = self.failureResultOf(d, NotReady).value
        self.assertEqual(error.ended.exit_code if error.ended else None, 1)
        self.assertIn("boom", str(error))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_cancelled(self) -> None:
        """Cancelling the wait cancels the timer and the agent waiter."""
        d = self.wait()
        d.cancel()
        self.failureResultOf(d)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual(self.agent._waiters, [])


class BoundedHealthTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.agent = FakeAgent("agent.sock")
        self.agent.ready()

    def health(self) -> Deferred[object]:
        return Deferred.fromCoroutine(bounded_health(self.clock, "demo-1", self.agent))

    def test_answer(self) -> None:
        """An agent that answers gives its health at once."""
        self.assertEqual(self.successResultOf(self.health()).agent_version, "0.1.0")

    def test_agent_that_never_answers(self) -> None:
        """An agent that never answers is a 503 after the limit, not a hang."""
        self.agent.hold_health = Deferred()
        d = self.health()
        self.clock.advance(HEALTH_LIMIT - 0.1)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        error = self.failureResultOf(d, AgentNotConnected).value
        self.assertIn("did not answer within 2 s", str(error))

    def test_failure_at_once(self) -> None:
        """An agent that cannot answer fails at once, without waiting for the limit."""
        self.agent.is_ready = False
        self.failureResultOf(self.health(), AgentNotConnected)
        self.assertEqual(self.clock.getDelayedCalls(), [])
