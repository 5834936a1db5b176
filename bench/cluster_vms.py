"""
The parts of ``bench/cluster.py`` that run real daemons as cluster nodes (blocking): ``apply`` (a Pod's
way to Ready beside the daemon's own create of the same VM) and ``loss`` (a host killed, its pod
replaced on the other host, then its return reconciled).
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import statistics
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from tests.integration.daemon import Daemon, ensure_image, free_port, processes_under
from tests.integration.faults import remove_network
from vmservice.config.kubeconfig import load_kubeconfig

#: Seconds any one wait may take before the run fails.
TIMEOUT = 300.0
#: How often the pod is looked at while it boots.
POLL = 0.05
#: Each host's network range and the prefixes of its network objects (removed after a kill).
RANGES = {"vms-a": ("10.88.9.0/28", ("vmh0a5809", "vms-0a5809")),
          "vms-b": ("10.88.10.0/28", ("vmh0a580a", "vms-0a580a")),
          "warm": ("10.88.11.0/28", ("vmh0a580b", "vms-0a580b"))}
TOLERATION = {"key": "vmservice.io/vm", "operator": "Exists", "effect": "NoSchedule"}
VM = {"vcpu": 1, "ram_mb": 256, "storage_size": "1G"}

ControlPlaneStart = Callable[[str, list[str]], dict[str, Any]]


class Admin:
    """The control plane's administrator, over blocking HTTPS calls."""

    def __init__(self, directory: str) -> None:
        view = load_kubeconfig(os.path.join(directory, "admin.kubeconfig"))
        assert view.token is not None and view.ca_file is not None
        self._server, self._token = view.server, view.token
        self._context = ssl.create_default_context(cafile=view.ca_file)

    def call(self, method: str, path: str, body: object = None, missing_ok: bool = False) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self._server + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self._token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30, context=self._context) as response:
                return json.loads(response.read(8 << 20) or b"{}")
        except urllib.error.HTTPError as error:
            if missing_ok and error.code == 404:
                return None
            raise RuntimeError(f"{method} {path}: {error.code} {error.read(4096)!r}") from None

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.call("GET", f"/api/v1/namespaces/default/pods?labelSelector={selector}")["items"]
        return items


def ready(pod: dict[str, Any] | None) -> bool:
    """Whether ``pod`` is Ready (and not being deleted)."""
    if not pod or "deletionTimestamp" in pod["metadata"]:
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def until(what: str, probe: Callable[[], Any], interval: float = POLL) -> float:
    """Seconds until ``probe()`` is true."""
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > TIMEOUT:
            raise RuntimeError(f"{what}: not within {TIMEOUT} s")
        time.sleep(interval)
    return time.monotonic() - started


def node_daemon(directory: str, name: str, groups: list[dict[str, Any]]) -> Daemon:
    """A daemon that is host ``name`` of the control plane in ``directory``."""
    return Daemon(groups=groups, kubernetes={
        "kubeconfig": os.path.join(directory, "nodes", f"{name}.kubeconfig"), "node_name": name,
        "internal_ip": "127.0.0.1", "default_group": groups[0]["name"],
        "renew_interval_seconds": 2, "status_interval_seconds": 2, "kubelet_port": free_port(),
        "kubelet_client_ca_file": os.path.join(directory, "ca.crt")})


def pod(name: str, group: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A VM pod of ``group``: tolerates the vmservice taint, selects vmservice Nodes, one slot."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {"bench": "apply"}},
            "spec": {"nodeSelector": {"type": "vmservice"}, "tolerations": [TOLERATION],
                     "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "vm", "image": f"vmservice.io/group/{group}",
                                     "resources": {"limits": {"vmservice.io/slots": "1"}}}]}}


def _pod_round(admin: Admin, daemon: Daemon, group: str, index: int) -> dict[str, float]:
    """One Pod of ``group`` to Ready and gone, then one API create of it: their seconds."""
    name = f"{group}-{index}"
    path = f"/api/v1/namespaces/default/pods/{name}"
    posted = time.monotonic()
    admin.call("POST", "/api/v1/namespaces/default/pods", pod(name, group))
    until(f"pod {name} Ready", lambda: ready(admin.call("GET", path, missing_ok=True)))
    pod_ready = time.monotonic() - posted
    admin.call("DELETE", path)
    until(f"pod {name} gone", lambda: admin.call("GET", path, missing_ok=True) is None, 0.2)
    started = time.monotonic()
    created = daemon.json("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=2m", {}, expect=201)
    api_create = time.monotonic() - started
    daemon.request("DELETE", f"/hostgroup/{group}/nodes/{created['hostname']}", timeout=TIMEOUT)
    return {"pod_ready_s": pod_ready, "api_create_s": api_create}


def _summary(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "samples": values}


def measure_apply(directory: str, start: ControlPlaneStart, rounds: int) -> dict[str, Any]:
    """The ``apply`` part: a cold and a warm group, ``rounds`` measured rounds each."""
    ensure_image()
    start(directory, ["vms-a"])
    admin = Admin(directory)
    groups = [{"name": "cold", **VM, "network": {"mode": "isolated", "range": RANGES["vms-a"][0]}},
              {"name": "warm", **VM, "warm": True, "warm_spare": 1,
               "network": {"mode": "isolated", "range": RANGES["warm"][0]}}]
    daemon = node_daemon(directory, "vms-a", groups)
    figures: dict[str, Any] = {}
    try:
        daemon.start()
        until("the Node Ready", lambda: ready(admin.call("GET", "/api/v1/nodes/vms-a", missing_ok=True)), 0.5)
        for group in ("cold", "warm"):
            _pod_round(admin, daemon, group, 0)  # unmeasured: the template is built, the caches filled
            samples = [_pod_round(admin, daemon, group, index) for index in range(1, rounds + 1)]
            pod_ready = _summary([s["pod_ready_s"] for s in samples])
            api_create = _summary([s["api_create_s"] for s in samples])
            figures[group] = {"pod_ready_s": pod_ready, "api_create_s": api_create,
                              "ratio_pod_ready_over_api_create": pod_ready["median"] / api_create["median"]}
    finally:
        daemon.cleanup()
        remove_network(RANGES["vms-a"][1] + RANGES["warm"][1])
    return {"rounds": rounds, "poll_s": POLL, "groups": figures}


def _kill(daemon: Daemon) -> None:
    """The daemon and every process of its state directory (its VMs), with SIGKILL."""
    daemon.stop(signal.SIGKILL)
    for pid in processes_under(daemon.state_dir):
        os.kill(pid, signal.SIGKILL)


def measure_loss(directory: str, start: ControlPlaneStart) -> dict[str, Any]:
    """The ``loss`` part: one VM pod's host killed; its replacement Ready on the other; its return."""
    ensure_image()
    start(directory, ["vms-a", "vms-b"])
    admin = Admin(directory)
    daemons = {name: node_daemon(directory, name, [{"name": "vm", **VM, "network": {
        "mode": "isolated", "range": RANGES[name][0]}}]) for name in ("vms-a", "vms-b")}
    template = pod("unused", "vm", {"bench": "loss"})
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "loss", "namespace": "default"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"bench": "loss"}},
                           "template": {"metadata": {"labels": {"bench": "loss"}}, "spec": template["spec"]}}}
    try:
        for daemon in daemons.values():
            daemon.start()
        admin.call("POST", "/apis/apps/v1/namespaces/default/deployments", deployment)
        until("the pod Ready", lambda: [p for p in admin.pods("bench=loss") if ready(p)], 0.2)
        lost = [p for p in admin.pods("bench=loss") if ready(p)][0]["spec"]["nodeName"]
        other = next(name for name in daemons if name != lost)
        killed = time.monotonic()
        _kill(daemons[lost])
        until("the replacement Ready", lambda: [p for p in admin.pods("bench=loss")
                                                if ready(p) and p["spec"]["nodeName"] == other], 0.2)
        replacement_ready = time.monotonic() - killed
        restarted = time.monotonic()
        daemons[lost].start()
        reconciled = until("the lost host reconciled", lambda: not [
            p for p in admin.pods("bench=loss") if p["spec"].get("nodeName") == lost], 0.2)
        reconciled_from_restart = time.monotonic() - restarted
        left = len(daemons[lost].json("GET", "/nodes"))
    finally:
        try:
            admin.call("DELETE", "/apis/apps/v1/namespaces/default/deployments/loss", missing_ok=True)
        except Exception:
            pass
        for name, daemon in daemons.items():
            daemon.cleanup()
            remove_network(RANGES[name][1])
    return {"replacement_ready_s": replacement_ready, "reconciled_s": reconciled_from_restart,
            "reconciled_after_start_s": reconciled, "vms_left_on_the_lost_host": left,
            "node_monitor_grace_period_s": 10, "unreachable_toleration_s": 2}
