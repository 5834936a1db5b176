# -*- test-case-name: tests.cluster.test_node_object -*-
"""
The Node as the daemon writes it (pure): its manifest at registration
(:func:`node_manifest`), its status (:func:`node_status`), its conditions
with their transition times kept (:func:`stamp_conditions`), and its
Lease (:func:`lease_manifest`).
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping, Sequence

from attrs import frozen

from ..config import KubernetesConfig
from .api_client import Json
from .capacity import Capacity
from .node_api import LEASE_NAMESPACE

#: The Kubernetes version the Node says its "kubelet" speaks (the API it was tested against).
KUBE_VERSION = "v1.20.2"
#: The reason of the Ready condition while the daemon runs.
READY_REASON = "VmserviceReady"


def rfc3339(seconds: float) -> str:
    """``seconds`` since the epoch as the API writes a time (whole seconds, UTC)."""
    return datetime.datetime.fromtimestamp(int(seconds), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(seconds: float) -> str:
    """``seconds`` as a Lease's ``MicroTime`` (microseconds, UTC)."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@frozen
class NodeInfo:
    """
    The Node's ``nodeInfo``: what the host is.

    :ivar kernel_version: The host's kernel release.
    :ivar architecture: The Go name of its architecture (``amd64``).
    :ivar version: vmservice's version.
    :ivar machine_id: The host's machine-id (may be empty).
    :ivar boot_id: The host's boot id (may be empty).
    """

    kernel_version: str
    architecture: str
    version: str
    machine_id: str = ""
    boot_id: str = ""

    def document(self) -> Json:
        """As the API writes it."""
        return {
            "machineID": self.machine_id, "systemUUID": self.machine_id, "bootID": self.boot_id,
            "kernelVersion": self.kernel_version, "osImage": f"vmservice {self.version}",
            "containerRuntimeVersion": f"vmservice://{self.version}",
            "kubeletVersion": f"{KUBE_VERSION}-vmservice-{self.version}", "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": self.architecture,
        }


@frozen
class Verdict:
    """One condition as the daemon judges it now: ``type``, ``status`` (``True``/``False``), reason, message."""

    type: str
    status: str
    reason: str
    message: str


def verdicts(memory_pressure: bool) -> tuple[Verdict, ...]:
    """The node's conditions now: Ready, MemoryPressure from admission, no disk or PID pressure."""
    memory = (Verdict("MemoryPressure", "True", "VmserviceMemoryBudgetFull",
                      "admission's memory budget has no room for a VM of the smallest group")
              if memory_pressure else
              Verdict("MemoryPressure", "False", "VmserviceHasMemory", "admission's memory budget has room"))
    return (
        Verdict("Ready", "True", READY_REASON, "vmservice is running"),
        memory,
        Verdict("DiskPressure", "False", "VmserviceNoDiskPressure", "no disk pressure"),
        Verdict("PIDPressure", "False", "VmserviceNoPIDPressure", "no PID pressure"),
    )


def stamp_conditions(now: float, judged: Sequence[Verdict], previous: Sequence[Any]) -> list[Json]:
    """
    ``judged`` as the Node's conditions at ``now``: each with its heartbeat
    now, and its transition time kept from ``previous`` (the conditions last
    written, or read from the Node) when its status did not change (and
    it is a time's length: nothing more of what was read is written back).
    """
    before = {c.get("type"): c for c in previous if isinstance(c, dict)}
    stamped = []
    for verdict in judged:
        old = before.get(verdict.type)
        kept = (isinstance(old, dict) and old.get("status") == verdict.status
                and isinstance(old.get("lastTransitionTime"), str) and len(old["lastTransitionTime"]) <= 40)
        stamped.append({
            "type": verdict.type, "status": verdict.status, "reason": verdict.reason, "message": verdict.message,
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": old["lastTransitionTime"] if kept and old is not None else rfc3339(now),
        })
    return stamped


def node_status(config: KubernetesConfig, capacity: Capacity, info: NodeInfo, conditions: list[Json]) -> Json:
    """The Node's status: capacity = allocatable, conditions, addresses, the kubelet endpoint, nodeInfo."""
    return {
        "capacity": capacity.resources(), "allocatable": capacity.resources(), "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": config.internal_ip},
                      {"type": "Hostname", "address": config.node_name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": config.kubelet_port}},
        "nodeInfo": info.document(),
    }


def taints(config: KubernetesConfig) -> list[Json]:
    """The Node's taints as the API writes them."""
    return [{"key": t.key, "value": t.value, "effect": t.effect} if t.value else {"key": t.key, "effect": t.effect}
            for t in config.taints]


#: The Node's annotation that says where the host's vmservice API is (``http://ADDRESS:PORT``).
API_ANNOTATION = "vmservice.io/api"


def node_annotations(config: KubernetesConfig) -> dict[str, str]:
    """The Node's annotations: where the host's vmservice API is, when it listens on TCP."""
    return {API_ANNOTATION: config.vmservice_api} if config.vmservice_api else {}


def node_manifest(config: KubernetesConfig, status: Mapping[str, Any]) -> Json:
    """The Node to register: name, labels, annotations (when any), taints, status."""
    metadata: Json = {"name": config.node_name, "labels": dict(config.labels)}
    if config.vmservice_api:
        metadata["annotations"] = node_annotations(config)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": metadata,
        "spec": {"taints": taints(config)},
        "status": dict(status),
    }


def lease_manifest(config: KubernetesConfig, node_uid: str, now: float) -> Json:
    """The node's Lease, new: held by the node, owned by its Node (deleted with it)."""
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": config.node_name, "namespace": LEASE_NAMESPACE,
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": config.node_name,
                                          "uid": node_uid}]},
        "spec": {"holderIdentity": config.node_name, "leaseDurationSeconds": config.lease_duration_seconds,
                 "renewTime": micro_time(now)},
    }


__all__ = ["API_ANNOTATION", "KUBE_VERSION", "NodeInfo", "READY_REASON", "Verdict", "lease_manifest", "micro_time", "node_annotations", "node_manifest",
           "node_status", "rfc3339", "stamp_conditions", "taints", "verdicts"]
