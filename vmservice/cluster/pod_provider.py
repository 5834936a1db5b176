# -*- test-case-name: tests.cluster.test_fleet_pods -*-
"""
The provider's side of the pod controller (Virtual Kubelet's
``PodLifecycleHandler``): the narrow interface over the VMs made for pods.
The controller knows nothing of VMs beyond it; the provider
(:class:`~.fleet_pods.FleetPods`) knows no Kubernetes HTTP and no watch.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable, Protocol

from attrs import frozen
from twisted.internet.defer import Deferred

from .pod_object import PodKey
from .pod_spec import PodSpec


class VmPhase(str, Enum):
    """Where a pod's VM stands."""

    #: Made, its agent has not answered yet.
    BOOTING = "booting"
    #: Running and its agent answered: the pod is Ready.
    RUNNING = "running"
    #: It ended or could not be made (its reason says why); nothing runs.
    FAILED = "failed"
    #: There is no VM for the pod.
    GONE = "gone"


@frozen
class VmState:
    """
    A pod's VM as it is.

    :ivar phase: where it stands.
    :ivar hostname: its hostname (empty when gone).
    :ivar ip: its address (empty without network).
    :ivar started_at: when it was made, seconds since the epoch.
    :ivar reason: why it failed (``VmStopped``, ``AdmissionRefused`` ...).
    :ivar message: what happened, one line.
    """

    phase: VmPhase
    hostname: str = ""
    ip: str = ""
    started_at: float = 0.0
    reason: str = ""
    message: str = ""


#: The state of a pod that has no VM.
GONE = VmState(VmPhase.GONE)


@frozen
class PodVm:
    """A VM made for a pod: which pod (and on which Node), and how it is."""

    key: PodKey
    node_name: str
    state: VmState


class PodProvider(Protocol):
    """What the pod controller asks of the VMs."""

    def create(self, spec: PodSpec, env: tuple[tuple[str, str], ...]) -> "Deferred[VmState]":
        """
        Make the VM of ``spec`` with environment ``env``; fires once its
        agent answered (or with its failure: a domain error, whose reason
        the pod's status gives).
        """

    def delete(self, key: PodKey, grace: float) -> "Deferred[None]":
        """Delete pod ``key``'s VM: shut down within ``grace`` seconds, then killed; fires once it is gone."""

    def state(self, key: PodKey) -> VmState:
        """Pod ``key``'s VM as it is now (:data:`GONE` when there is none)."""

    def vms(self) -> list[PodVm]:
        """Every VM this daemon made for a pod."""

    def notify(self, changed: Callable[[str], None]) -> Callable[[], None]:
        """Call ``changed`` with a pod's uid whenever its VM changes; returns a stop."""

    def hostname(self, key: PodKey) -> str | None:
        """The hostname of pod ``key``'s VM, or ``None``."""

    def sweep(self) -> None:
        """Remove what pods left that no VM of theirs needs any more (after a crash)."""


__all__ = ["GONE", "PodProvider", "PodVm", "VmPhase", "VmState"]
