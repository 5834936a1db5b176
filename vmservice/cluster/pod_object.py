# -*- test-case-name: tests.cluster.test_pod_spec -*-
"""
What the pod controller reads of any Pod the API sends (pure): which pod it
is (:class:`PodKey`: namespace, name, uid) and where it stands
(:class:`PodFacts`: bound to which node, being deleted and with what grace,
its phase, whether a VM was made for it, its ``PodScheduled`` condition).
An object without a usable key is no pod to act on; every other field is
read defensively (a wrong type counts as absent).
"""

from __future__ import annotations

import re
from typing import Any

from attrs import frozen

from .api_client import Json

#: A namespace or a pod's name as the API allows them (a DNS-1123 label; a subdomain of at most 253).
_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")
#: A uid: what the API server makes (a UUID); anything printable of at most 64 characters taken.
_UID = re.compile(r"[A-Za-z0-9-]{1,64}")
#: The scheme of a pod's ``containerID`` when its VM was made by this daemon.
CONTAINER_SCHEME = "vmservice://"
#: The longest grace a pod's deletion is given, in seconds (a hostile spec cannot hold a VM longer).
MAX_GRACE = 600


@frozen(order=True)
class PodKey:
    """
    Which pod: ``namespace/name`` and its ``uid`` (a pod deleted and made
    again under the same name has another uid).
    """

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@frozen
class PodFacts:
    """
    Where a pod stands, as the API says.

    :ivar key: which pod.
    :ivar node_name: ``spec.nodeName`` (empty when unbound).
    :ivar deleting: ``metadata.deletionTimestamp`` is set.
    :ivar grace: ``metadata.deletionGracePeriodSeconds`` (else
        ``spec.terminationGracePeriodSeconds``, else 30), at most :data:`MAX_GRACE`.
    :ivar phase: ``status.phase`` (``Pending`` when absent).
    :ivar vm_hostname: the VM's hostname its ``containerID`` names (a VM
        was made for it), or empty.
    :ivar scheduled: its ``PodScheduled`` condition, kept in every status written.
    :ivar container: its first container's name.
    :ivar image: its first container's image.
    :ivar start_time: ``status.startTime``, kept once set.
    """

    key: PodKey
    node_name: str = ""
    deleting: bool = False
    grace: int = 30
    phase: str = "Pending"
    vm_hostname: str = ""
    scheduled: Json | None = None
    container: str = ""
    image: str = ""
    start_time: str = ""

    @property
    def terminal(self) -> bool:
        """Whether the pod is over (``Failed`` or ``Succeeded``): nothing runs for it any more."""
        return self.phase in ("Failed", "Succeeded")


def _dict(value: Any) -> Json:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pod_key(pod: Json) -> PodKey | None:
    """The pod's key, or ``None`` when its metadata has no usable namespace, name or uid."""
    metadata = _dict(pod.get("metadata"))
    namespace, name, uid = metadata.get("namespace"), metadata.get("name"), metadata.get("uid")
    if not (isinstance(namespace, str) and isinstance(name, str) and isinstance(uid, str)):
        return None
    if len(namespace) > 63 or not _NAME.fullmatch(namespace) or not _NAME.fullmatch(name) or not _UID.fullmatch(uid):
        return None
    return PodKey(namespace, name, uid)


def _grace(metadata: Json, spec: Json) -> int:
    for value in (_int(metadata.get("deletionGracePeriodSeconds")), _int(spec.get("terminationGracePeriodSeconds"))):
        if value is not None:
            return min(max(value, 0), MAX_GRACE)
    return 30


def _vm_hostname(status: Json) -> str:
    statuses = status.get("containerStatuses")
    first = _dict(statuses[0]) if isinstance(statuses, list) and statuses else {}
    container_id = first.get("containerID")
    if isinstance(container_id, str) and container_id.startswith(CONTAINER_SCHEME):
        return container_id[len(CONTAINER_SCHEME):][:63]
    return ""


def pod_facts(pod: Json) -> PodFacts | None:
    """Where ``pod`` stands; ``None`` when it has no usable key."""
    key = pod_key(pod)
    if key is None:
        return None
    metadata, spec, status = _dict(pod.get("metadata")), _dict(pod.get("spec")), _dict(pod.get("status"))
    node_name, phase = spec.get("nodeName"), status.get("phase")
    conditions = status.get("conditions")
    scheduled = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "PodScheduled"), None) \
        if isinstance(conditions, list) else None
    containers = spec.get("containers")
    first = _dict(containers[0]) if isinstance(containers, list) and containers else {}
    container, image, start = first.get("name"), first.get("image"), status.get("startTime")
    return PodFacts(key=key, node_name=node_name if isinstance(node_name, str) else "",
                    deleting=metadata.get("deletionTimestamp") is not None, grace=_grace(metadata, spec),
                    phase=phase if isinstance(phase, str) and phase else "Pending", vm_hostname=_vm_hostname(status),
                    scheduled=scheduled, container=container[:63] if isinstance(container, str) else "",
                    image=image[:512] if isinstance(image, str) else "",
                    start_time=start[:40] if isinstance(start, str) else "")


__all__ = ["CONTAINER_SCHEME", "MAX_GRACE", "PodFacts", "PodKey", "pod_facts", "pod_key"]
