# -*- test-case-name: tests.cluster.test_capacity -*-
"""
What the Node advertises (:class:`Capacity`: cpu, memory, pods and the
extended resource ``vmservice.io/slots``) and whether it is short of memory
(:class:`NodeBudget`), both from admission's budget: the scheduler places
no more VM pods on the node than admission would admit.
"""

from __future__ import annotations

from attrs import frozen

from ..config import CapacityConfig, Config
from ..nodes.admission import Admission

#: The extended resource a VM pod requests (one per VM).
SLOTS = "vmservice.io/slots"
#: Pods advertised when the budget gives no count (no budget, or no host group): the kubelet's default.
DEFAULT_PODS = 110


@frozen
class Capacity:
    """
    What the Node advertises, as capacity and as allocatable alike.

    :ivar cpu: Whole CPUs.
    :ivar memory: Bytes.
    :ivar pods: Pods, and as many ``vmservice.io/slots``.
    """

    cpu: int
    memory: int
    pods: int

    def resources(self) -> dict[str, str]:
        """The Node's ``capacity`` (and ``allocatable``) as Kubernetes quantities."""
        return {"cpu": str(self.cpu), "memory": f"{self.memory // 1024}Ki", "pods": str(self.pods),
                SLOTS: str(self.pods)}


def smallest_vm(config: Config) -> int | None:
    """The guest RAM of the smallest host group's VM; ``None`` without groups."""
    return min((group.ram_bytes for group in config.host_groups), default=None)


def derive(settings: CapacityConfig, config: Config, admission: Admission, cpus: int | None,
           host_memory: int | None) -> Capacity:
    """
    The capacity of ``settings`` with what it leaves out derived: cpu from
    the host's CPUs, memory from admission's budget (else the host's RAM),
    pods from how many VMs of the smallest group the budget holds (and the
    groups' ``max_nodes`` when every group has one).
    """
    budget = admission.limits.budget
    memory = settings.memory or budget or host_memory or 0
    pods = settings.pods
    smallest = smallest_vm(config)
    if pods is None:
        pods = DEFAULT_PODS
        if budget is not None and smallest is not None:
            pods = budget // admission.cost(smallest)
        most = [group.max_nodes for group in config.host_groups]
        if most and all(count is not None for count in most):
            pods = min(pods, sum(count for count in most if count is not None))
    return Capacity(cpu=settings.cpu or max(1, cpus or 1), memory=memory, pods=pods)


class NodeBudget:
    """
    The node's memory as the cluster sees it.

    :param admission: the daemon's admission.
    :param smallest: the guest RAM of the smallest group's VM (``None``: no group, never short).
    """

    def __init__(self, admission: Admission, smallest: int | None) -> None:
        self._admission, self._smallest = admission, smallest

    def memory_pressure(self) -> bool:
        """Whether the budget has no room left for one VM of the smallest group."""
        budget = self._admission.limits.budget
        if budget is None or self._smallest is None:
            return False
        return self._admission.used()[0] + self._admission.cost(self._smallest) > budget


__all__ = ["Capacity", "DEFAULT_PODS", "NodeBudget", "SLOTS", "derive", "smallest_vm"]
