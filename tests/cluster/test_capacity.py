"""
Tests for :mod:`vmservice.cluster.capacity` (what the Node advertises, memory
pressure) and :mod:`vmservice.cluster.backoff`.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.config.parsing import parse_text
from vmservice.cluster.backoff import Backoff
from vmservice.cluster.capacity import DEFAULT_PODS, Capacity, NodeBudget, derive, smallest_vm
from vmservice.config import CapacityConfig
from vmservice.nodes.admission import Admission, Holder, Limits

GiB = 2**30
_GROUPS = """
config:
  host_groups:
    - {name: small, ram_gb: 1}
    - {name: big, ram_gb: 4}
"""


class CapacityTests(SynchronousTestCase):
    """Capacity from the configuration, the host and admission."""

    def test_derived(self) -> None:
        """cpu from the host, memory the budget, pods the smallest VMs the budget holds (RAM + overhead)."""
        config = parse_text(_GROUPS)
        admission = Admission(Clock(), Limits(budget=10 * GiB, overhead=GiB // 4))
        capacity = derive(CapacityConfig(), config, admission, 6, 64 * GiB)
        self.assertEqual(capacity, Capacity(cpu=6, memory=10 * GiB, pods=8))
        self.assertEqual(capacity.resources(), {"cpu": "6", "memory": f"{10 * 2**20}Ki", "pods": "8",
                                                "vmservice.io/slots": "8"})

    def test_given(self) -> None:
        """What the file gives wins."""
        config = parse_text(_GROUPS)
        capacity = derive(CapacityConfig(cpu=2, memory=GiB, pods=3), config, Admission.unlimited(), 6, None)
        self.assertEqual(capacity, Capacity(cpu=2, memory=GiB, pods=3))

    def test_no_budget(self) -> None:
        """Without a budget: the host's RAM and the default pod count; max_nodes of every group bound it."""
        capacity = derive(CapacityConfig(), parse_text(_GROUPS), Admission.unlimited(), None, 8 * GiB)
        self.assertEqual(capacity, Capacity(cpu=1, memory=8 * GiB, pods=DEFAULT_PODS))
        bounded = parse_text("config:\n  host_groups:\n    - {name: a, max_nodes: 2}\n    - {name: b, max_nodes: 3}\n")
        self.assertEqual(derive(CapacityConfig(), bounded, Admission.unlimited(), 1, GiB).pods, 5)
        self.assertIsNone(smallest_vm(parse_text("config: {}\n")))

    def test_memory_pressure(self) -> None:
        """Short when the budget has no room for one more VM of the smallest group."""
        admission = Admission(Clock(), Limits(budget=3 * GiB))
        running = [Holder("a-1", "a", GiB, True)]
        admission.watch(lambda: running)
        budget = NodeBudget(admission, GiB)
        self.assertFalse(budget.memory_pressure())
        running.append(Holder("a-2", "a", GiB, True))
        self.assertFalse(budget.memory_pressure())
        running.append(Holder("a-3", "a", GiB, True))
        self.assertTrue(budget.memory_pressure())
        self.assertFalse(NodeBudget(Admission.unlimited(), GiB).memory_pressure())
        self.assertFalse(NodeBudget(admission, None).memory_pressure())


class BackoffTests(SynchronousTestCase):
    """Capped exponential back-off with jitter."""

    def test_delays(self) -> None:
        """Doubling up to the cap, each in its upper half as the random source says; reset starts again."""
        draws = iter([0.0, 0.999, 0.0, 0.0, 0.0, 0.0, 0.0])
        backoff = Backoff(lambda: next(draws), initial=1, cap=4)
        self.assertEqual([round(backoff.delay(), 3) for _ in range(5)], [0.5, 1.999, 2.0, 2.0, 2.0])
        backoff.reset()
        self.assertEqual(backoff.delay(), 0.5)
