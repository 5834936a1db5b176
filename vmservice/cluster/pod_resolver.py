# -*- test-case-name: tests.cluster.test_pod_controller -*-
"""
:class:`PodResolver`: a pod's container as the VM that runs it, for the
kubelet API (``kubectl logs``, ``kubectl exec``): (namespace, pod,
container) → the VM's hostname, from the pods the controller keeps.
"""

from __future__ import annotations

from .pod_controller import PodController


class PodResolver:
    """
    The VMs of the pods bound to this Node.

    :param pods: the pod controller.
    """

    def __init__(self, pods: PodController) -> None:
        self._pods = pods

    def __call__(self, namespace: str, pod: str, container: str) -> str | None:
        """The hostname of the VM of ``namespace/pod`` (its one container, whatever ``container`` names), or ``None``."""
        return self._pods.hostname(namespace, pod)


__all__ = ["PodResolver"]
