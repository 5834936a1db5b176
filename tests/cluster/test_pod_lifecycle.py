"""
Tests for :mod:`vmservice.cluster.pod_lifecycle`: the machine against its
diagram, and the events it records.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.cluster.pod_lifecycle import POD_MACHINE, PodCore


class PodLifecycleTests(SynchronousTestCase):
    def test_diagram(self) -> None:
        """docs/state-machines/pod-lifecycle.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("pod-lifecycle.dot"), machine_transitions(POD_MACHINE))

    def test_events(self) -> None:
        """Created and Started once made, Killing on delete; late inputs ignored."""
        seen: list[str] = []
        pod = POD_MACHINE(PodCore("default/web", lambda kind, reason, message: seen.append(reason)))
        pod.create()
        pod.made("web")
        pod.adopted("web")
        pod.failed("VmStopped", "stopped")
        pod.failed("VmStopped", "stopped")
        pod.delete("web")
        pod.made("web")
        pod.deleted()
        pod.delete("")
        self.assertEqual(seen, ["Created", "Started", "Failed", "Killing"])

    def test_failed_create(self) -> None:
        seen: list[str] = []
        pod = POD_MACHINE(PodCore("default/web", lambda kind, reason, message: seen.append(reason)))
        pod.create()
        pod.failed("InsufficientMemory", "no room")
        pod.delete("")
        self.assertEqual(seen, ["FailedCreate"])
