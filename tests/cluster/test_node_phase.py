"""
Tests for :mod:`vmservice.cluster.node_phase`: the machine against its
diagram, and what it sets going.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.cluster.node_phase import PHASE_MACHINE, PhaseCore


class PhaseTests(SynchronousTestCase):
    """The node's phase."""

    def test_diagram(self) -> None:
        """docs/state-machines/cluster-node.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("cluster-node.dot"), machine_transitions(PHASE_MACHINE))

    def test_outputs(self) -> None:
        """Registration, its retry, the loops and the halt are set going by their transitions only."""
        done: list[str] = []
        phase = PHASE_MACHINE(PhaseCore("vms-a", lambda: done.append("register"),
                                        lambda: done.append("later"), lambda: done.append("loops"),
                                        lambda: done.append("halt")))
        phase.start()
        phase.register_failed("boom")
        phase.registered()
        phase.renewed()
        phase.renew_failed("x")
        phase.renewed()
        phase.stop()
        phase.stop()
        phase.renewed()
        self.assertEqual(done, ["register", "later", "loops", "halt"])
