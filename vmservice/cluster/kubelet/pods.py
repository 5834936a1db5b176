# -*- test-case-name: tests.cluster.kubelet.test_site -*-
"""
What the kubelet API asks of the pod side: which VM a pod's container is
(:class:`PodResolver`), and the pods it knows (:class:`PodList`).  The pod
controller answers both; the kubelet API knows nothing of how pods become VMs.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

from attrs import frozen

from ...errors import NotFound


class PodNotFound(NotFound):
    """No pod of that namespace and name runs here, or it has no such container (404)."""

    code = "pod_not_found"


@frozen
class PodRef:
    """
    One pod this node runs, as ``GET /pods`` lists it.

    :ivar namespace: its namespace.
    :ivar name: its name.
    :ivar uid: its uid, as the API server gave it.
    :ivar containers: the names of its containers (one: the VM).
    :ivar hostname: the VM's hostname.
    """

    namespace: str
    name: str
    uid: str
    containers: tuple[str, ...]
    hostname: str


class PodResolver(Protocol):
    """
    Which VM a pod's container is (:class:`vmservice.cluster.pod_resolver.PodResolver`
    is one, over the pod controller).
    """

    def __call__(self, namespace: str, pod: str, container: str) -> Optional[str]:
        """The hostname of the VM that is container ``container`` of pod ``namespace/pod``, or ``None``: no such pod here."""


class PodList(Protocol):
    """The pods of this node, for ``GET /pods``."""

    def __call__(self) -> Sequence[PodRef]:
        """Each pod this node runs."""


__all__ = ["PodList", "PodNotFound", "PodRef", "PodResolver"]
