"""Tests for :mod:`vmservice.nodes.phase`: a node's phase as an automat machine."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.errors import Conflict
from vmservice.nodes.phase import NODE_PHASE, NodePhase, node_phase

#: Inputs a test may send, with their arguments.
_INPUTS = st.sampled_from(["started", "begin:pause", "begin:restore", "finish", "abandon"])


def _send(phase: NodePhase, step: str) -> str:
    """Send one input; what happened ("ok" or "busy")."""
    name, _, argument = step.partition(":")
    try:
        if name == "begin":
            phase.begin(argument)
        else:
            getattr(phase, name)()
    except Conflict as error:
        assert error.code == "busy", error
        return "busy"
    return "ok"


class _Model:
    """What the phase should be after each input: a plain model to compare with."""

    def __init__(self) -> None:
        self.state = "Starting"
        self.doing = ""

    def send(self, step: str) -> str:
        name, _, argument = step.partition(":")
        if name == "started":
            if self.state == "Starting":
                self.state = "Up"
        elif name == "begin":
            if self.state != "Up":
                return "busy"
            self.state, self.doing = "Busy", argument
        elif name == "finish":
            if self.state == "Busy":
                self.state = "Up"
        elif name == "abandon":
            self.state = "Removing"
        return "ok"

    @property
    def persists(self) -> bool:
        return self.state != "Removing"

    @property
    def news(self) -> bool:
        return self.state != "Removing" and not (self.state == "Busy" and self.doing == "restore")


class PhaseTests(SynchronousTestCase):
    def test_operation_holds_others_off(self) -> None:
        """One operation at a time: a second begin is 409 busy, naming the first; finish frees the node."""
        phase = node_phase("demo-1")
        phase.started()
        phase.begin("suspend")
        error = self.assertRaises(Conflict, phase.begin, "pause")
        self.assertEqual((error.code, str(error)), ("busy", "node 'demo-1' is busy (suspend)"))
        phase.finish()
        phase.begin("pause")

    def test_not_before_started(self) -> None:
        """A node that has not started refuses operations."""
        self.assertEqual(self.assertRaises(Conflict, node_phase("a").begin, "pause").code, "busy")

    def test_restore_owns_its_vm_end(self) -> None:
        """While a restore runs the VM's end is not news; during other operations it is."""
        phase = node_phase("a")
        phase.started()
        phase.begin("restore")
        self.assertFalse(phase.vm_end_is_news())
        phase.finish()
        phase.begin("pause")
        self.assertTrue(phase.vm_end_is_news())

    def test_abandoned_writes_nothing(self) -> None:
        """Once abandoned, nothing is written, nothing is news, and nothing leaves the phase."""
        phase = node_phase("a")
        phase.started()
        phase.abandon()
        phase.finish()
        phase.started()
        self.assertEqual((phase.persists(), phase.vm_end_is_news()), (False, False))
        self.assertRaises(Conflict, phase.begin, "pause")

    @given(st.lists(_INPUTS, max_size=20))
    def test_every_sequence(self, steps: list[str]) -> None:
        """Every sequence of inputs either moves to a valid phase or is refused busy, as the model says."""
        phase, model = node_phase("a"), _Model()
        for step in steps:
            self.assertEqual(_send(phase, step), model.send(step), steps)
            self.assertEqual((phase.persists(), phase.vm_end_is_news()), (model.persists, model.news), steps)


class DiagramTests(SynchronousTestCase):
    """``docs/state-machines/node-phase.dot`` against the machine."""

    def test_every_transition(self) -> None:
        """The diagram has an edge for exactly the machine's transitions, loops included."""
        self.assertEqual(drawn_transitions("node-phase.dot"), machine_transitions(NODE_PHASE))
