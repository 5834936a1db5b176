# -*- test-case-name: tests.cluster.test_pod_controller -*-
"""
A VM pod's ``status`` as written (pure): the body of a merge patch of the
Pod's ``status`` subresource.  A merge patch replaces the ``conditions``
list whole, so each body carries the pod's ``PodScheduled`` condition as
the scheduler wrote it.  Three shapes:

- :func:`creating`: ``Pending``, the container waiting (``ContainerCreating``);
- :func:`running`: ``Running`` with ``podIP``/``podIPs`` (the VM's address),
  ``hostIP`` (the Node's InternalIP), ``Initialized``, ``ContainersReady``
  and ``Ready`` True once the VM's agent answered, the container running
  since the VM was made, ``containerID: vmservice://<hostname>``;
- :func:`failed`: ``Failed`` with a reason and message, the container
  terminated.
"""

from __future__ import annotations

from typing import Any

from .api_client import Json
from .node_object import rfc3339
from .pod_object import CONTAINER_SCHEME, PodFacts
from .pod_provider import VmPhase, VmState


def _condition(kind: str, true: bool, now: str, reason: str = "", message: str = "") -> Json:
    condition: Json = {"type": kind, "status": "True" if true else "False", "lastProbeTime": None,
                       "lastTransitionTime": now}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _conditions(facts: PodFacts, ready: bool, now: str, message: str = "") -> list[Json]:
    conditions = [] if facts.scheduled is None else [facts.scheduled]
    conditions.append(_condition("Initialized", True, now))
    reason = "" if ready else "ContainersNotReady"
    conditions.append(_condition("ContainersReady", ready, now, reason))
    conditions.append(_condition("Ready", ready, now, reason, message))
    return conditions


def _container(facts: PodFacts, state: Json, ready: bool, hostname: str = "") -> Json:
    status: Json = {"name": facts.container, "image": facts.image, "imageID": "", "ready": ready,
                    "restartCount": 0, "started": "running" in state, "state": state}
    if hostname:
        status["containerID"] = CONTAINER_SCHEME + hostname
    return status


def _base(facts: PodFacts, phase: str, host_ip: str, now: str) -> dict[str, Any]:
    return {"phase": phase, "hostIP": host_ip, "startTime": facts.start_time or now}


def creating(facts: PodFacts, host_ip: str, now: str) -> Json:
    """The status of a pod whose VM is being made."""
    status = _base(facts, "Pending", host_ip, now)
    status["conditions"] = _conditions(facts, False, now)
    status["containerStatuses"] = [_container(facts, {"waiting": {"reason": "ContainerCreating"}}, False)]
    return status


def running(facts: PodFacts, vm: VmState, host_ip: str, now: str) -> Json:
    """The status of a pod whose VM runs (Ready once its agent answered)."""
    ready = vm.phase is VmPhase.RUNNING
    status = _base(facts, "Running", host_ip, now)
    status["conditions"] = _conditions(facts, ready, now, f"VM {vm.hostname}" if ready else
                                       f"VM {vm.hostname}: its agent has not answered")
    if vm.ip:
        status["podIP"], status["podIPs"] = vm.ip, [{"ip": vm.ip}]
    started = {"running": {"startedAt": rfc3339(vm.started_at) if vm.started_at else now}}
    status["containerStatuses"] = [_container(facts, started, ready, vm.hostname)]
    return status


def failed(facts: PodFacts, reason: str, message: str, host_ip: str, now: str, vm: VmState | None = None) -> Json:
    """The status of a pod whose VM failed, ended, or could not be made."""
    status = _base(facts, "Failed", host_ip, now)
    status["reason"], status["message"] = reason, message
    status["conditions"] = _conditions(facts, False, now)
    terminated: Json = {"exitCode": 1, "reason": reason, "message": message, "finishedAt": now}
    if vm is not None and vm.started_at:
        terminated["startedAt"] = rfc3339(vm.started_at)
    hostname = vm.hostname if vm is not None else facts.vm_hostname
    status["containerStatuses"] = [_container(facts, {"terminated": terminated}, False, hostname)]
    return status


def essence(status: Json) -> Json:
    """``status`` without its times: two statuses the same but for when they were written are one."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()
                    if k not in ("lastTransitionTime", "startedAt", "finishedAt", "startTime")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    result: Json = strip(status)
    return result


__all__ = ["creating", "essence", "failed", "running"]
