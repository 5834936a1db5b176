"""Tests for :mod:`vmservice.e2b.life`: the sandbox's machine and its diagram."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.e2b.life import SANDBOX_LIFE, LifeCore, LifeInputs, Verdict, go_ahead
from vmservice.errors import Conflict, NotFound


class LifeTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.done: list[str] = []
        self.life: LifeInputs = SANDBOX_LIFE(LifeCore(lambda: self.done.append("arm"),
                                                      lambda: self.done.append("disarm"),
                                                      lambda: self.done.append("retry")))

    def test_diagram(self) -> None:
        """The diagram has an edge for exactly the machine's transitions, loops included."""
        self.assertEqual(drawn_transitions("e2b-sandbox.dot"), machine_transitions(SANDBOX_LIFE))

    def test_timer_while_running(self) -> None:
        """The timer runs exactly while Running: armed on entry, stopped on every way out."""
        self.life.created()
        self.assertEqual(self.life.pause(), Verdict.GO)
        self.life.pause_failed()
        self.assertEqual(self.life.pause(), Verdict.GO)
        self.life.paused()
        self.assertEqual(self.life.resume(), Verdict.GO)
        self.life.resumed()
        self.life.gone()
        self.assertEqual(self.done, ["arm", "disarm", "arm", "disarm", "arm", "disarm"])

    def test_verdicts(self) -> None:
        """Already, busy and gone where they apply."""
        self.life.created()
        self.assertEqual(self.life.resume(), Verdict.ALREADY)
        self.life.pause()
        self.assertEqual((self.life.pause(), self.life.resume()), (Verdict.BUSY, Verdict.BUSY))
        self.life.paused()
        self.assertEqual(self.life.pause(), Verdict.ALREADY)
        self.assertEqual(self.life.kill(), Verdict.GO)
        self.assertEqual((self.life.kill(), self.life.pause(), self.life.resume()), (Verdict.GONE,) * 3)

    def test_failed_kill(self) -> None:
        """A failed kill: Running, the timer asking again."""
        self.life.created()
        self.life.kill()
        self.life.kill_failed()
        self.assertEqual(self.done, ["arm", "disarm", "retry"])
        self.assertEqual(self.life.kill(), Verdict.GO)

    def test_found_paused(self) -> None:
        """A sandbox read back suspended starts Paused, without a timer."""
        self.life.found_paused()
        self.assertEqual((self.life.pause(), self.done), (Verdict.ALREADY, []))

    def test_go_ahead(self) -> None:
        """Verdicts as the domain's errors."""
        go_ahead(Verdict.GO, "x")
        go_ahead(Verdict.ALREADY, "x")
        self.assertRaises(NotFound, go_ahead, Verdict.GONE, "x")
        self.assertEqual(self.assertRaises(Conflict, go_ahead, Verdict.BUSY, "x").code, "busy")
        self.assertEqual(self.assertRaises(Conflict, go_ahead, Verdict.ALREADY, "x", "already_paused").code,
                         "already_paused")
