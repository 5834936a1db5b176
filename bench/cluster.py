"""
Cluster benchmark: the real development control plane (``python -m vmservice.devcluster``) under a
fleet of simulated vmservice hosts, so that the path to hundreds of hosts is measured, not guessed.

``--parts scale`` starts a control plane with an identity per simulated host, then ``--hosts``
simulated hosts (default 100) in this one process. Each speaks the protocol a vmservice daemon speaks,
with the daemon's own client (``vmservice.cluster.api_client``) and watch loop
(``vmservice.cluster.watch_loop``), as its own node identity: it registers its Node (the vmservice
taint, ``vmservice.io/slots`` capacity), holds and renews its Lease in ``kube-node-lease`` every
10 s, lists then watches the Pods bound to it, reports each one Running at once (no VM: what is
measured is the control plane and the protocol, not a boot), and deletes the Pods the control plane
marks for deletion. Then the administrator creates a Deployment of ``--pods`` pods (default 1,000)
that tolerate the taint and select ``type: vmservice`` nodes, and the run times:

- ``control_plane_start_s``: ``python -m vmservice.devcluster start`` (its programs in the cache), from
  the command to ``/readyz`` ok; ``join_s``: until every host's Node and Lease are registered;
- ``scheduled_s``: from the Deployment's creation until every pod is bound to a host (the hosts see
  them), and ``pods_bound_a_second`` (pods over that time);
- ``running_s``: until every pod was reported Running, and ``pods_running_a_second``;
- ``deleted_s``: from the Deployment's deletion until every pod is gone;
- the peak RSS of kube-apiserver and etcd over the run, and their CPU (cores) while the fleet is idle
  with every pod Running (``--idle`` seconds, default 20).

``--parts apply`` runs one real daemon as host ``vms-a`` of a control plane of its own, with two
groups of the smallest VM: ``cold`` (each VM boots) and ``warm`` (clones of a warm template, one spare).
For each group, ``--rounds`` times (default 3, after one unmeasured round that builds the template):
``pod_ready_s``, from the POST of a Pod (what ``kubectl apply`` sends) until the Pod is Ready, polled
every 50 ms, and beside it in the same round ``api_create_s``, the daemon's own create of the same
group through its API (``wait=agent``): ``ratio_pod_ready_over_api_create`` is what the way through
Kubernetes costs over the daemon's floor for the same VM.

``--parts loss`` runs two real daemons as hosts ``vms-a`` and ``vms-b`` and a Deployment of one VM
pod; it kills the daemon whose pod it is, with its VMs (``SIGKILL``), and times ``replacement_ready_s``
until a replacement pod is Ready on the other host; then starts the killed daemon again and times
``reconciled_s`` until nothing of its pods is left on its Node. The control plane's flags set most of
that time: the Node is NotReady after ``--node-monitor-grace-period=10s`` without a Lease renewal and
its pods are evicted ``--default-unreachable-toleration-seconds=2`` later.

The scheduler and the controller-manager run with the flags docs/cluster.md lists (the
controller-manager's ``--kube-api-qps=50 --kube-api-burst=100``); the time per pod is theirs and the
API server's, the hosts answer at once. Writes ``bench/results/cluster.json``.

    .venv/bin/python bench/cluster.py [--parts apply,loss,scale] [--rounds 3] [--hosts 100] [--pods 1000]
                                      [--idle 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet.defer import Deferred, DeferredList, ensureDeferred  # noqa: E402
from twisted.internet.interfaces import IReactorTime  # noqa: E402
from twisted.internet.task import LoopingCall, deferLater, react  # noqa: E402

from bench.cluster_vms import measure_apply, measure_loss  # noqa: E402

from bench.recording import begin, cpu_seconds, peak_rss, write_result  # noqa: E402
from vmservice.cluster.api_client import ApiClient  # noqa: E402
from vmservice.cluster.api_errors import ApiError, NotFound  # noqa: E402
from vmservice.cluster.node_object import micro_time, rfc3339  # noqa: E402
from vmservice.cluster.watch_events import WatchEvent  # noqa: E402
from vmservice.cluster.watch_loop import WatchLoop  # noqa: E402
from vmservice.config.kubeconfig import load_kubeconfig  # noqa: E402
from vmservice.service.cluster_node import https_client  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "cluster.json")
#: Seconds any one phase may take before the run fails.
PHASE_TIMEOUT = 600.0
#: Seconds between a simulated host's Lease renewals (a vmservice daemon's default is 10).
RENEW_INTERVAL = 10.0
MERGE_PATCH = "application/merge-patch+json"


class SimulatedHost:
    """One simulated vmservice host: its Node, its Lease, and the pods bound to it reported Running."""

    def __init__(self, clock: IReactorTime, client: ApiClient, name: str, index: int, slots: int,
                 seen: Callable[[str], None], running: Callable[[str], None]) -> None:
        self._clock, self._client, self.name, self._index, self._slots = clock, client, name, index, slots
        self._seen, self._running = seen, running
        self._reported: set[str] = set()
        self._stopped = False
        self._renewals = LoopingCall(self._renew)
        self._renewals.clock = clock
        self.watch = WatchLoop(clock, client, "/api/v1/pods", {"fieldSelector": f"spec.nodeName={name}"},
                               self, random.random, list_kind="PodList")

    async def join(self) -> None:
        """Register the Node and the Lease, then renew and watch."""
        now = time.time()
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": {"type": "vmservice", "kubernetes.io/hostname": self.name}},
            "spec": {"taints": [{"key": "vmservice.io/vm", "value": "true", "effect": "NoSchedule"}]},
        }
        created = await self._client.call("POST", "/api/v1/nodes", node, kind="Node")
        resources = {"cpu": "64", "memory": "256Gi", "pods": str(self._slots), "vmservice.io/slots": str(self._slots)}
        condition = {"type": "Ready", "status": "True", "reason": "VmserviceReady", "message": "simulated",
                     "lastHeartbeatTime": rfc3339(now), "lastTransitionTime": rfc3339(now)}
        status = {"capacity": resources, "allocatable": resources, "conditions": [condition],
                  "addresses": [{"type": "InternalIP", "address": self.address}],
                  "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}
        await self._client.call("PATCH", f"/api/v1/nodes/{self.name}/status", {"status": status},
                                content_type=MERGE_PATCH, kind="Node")
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.name, "namespace": "kube-node-lease",
                              "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name,
                                                   "uid": created["metadata"]["uid"]}]},
                 "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": micro_time(now)}}
        await self._client.call("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)
        self._renewals.start(RENEW_INTERVAL, now=False)
        self.watch.start()

    @property
    def address(self) -> str:
        return f"10.{100 + self._index // 250}.{self._index % 250}.1"

    def _renew(self) -> Deferred[Any]:
        patch = {"spec": {"renewTime": micro_time(time.time())}}
        done = self._client.call("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}",
                                 patch, content_type=MERGE_PATCH)
        return done.addErrback(self._failed)

    def stop(self) -> None:
        self._stopped = True  # what fails from now on is the reactor's shutdown, not the control plane
        if self._renewals.running:
            self._renewals.stop()
        self.watch.stop()

    # -- the watch's handler --------------------------------------------------------------

    def listed(self, items: list[dict[str, Any]]) -> None:
        for pod in items:
            self._pod(pod)

    def changed(self, event: WatchEvent) -> None:
        if event.type in ("ADDED", "MODIFIED"):
            self._pod(event.object)

    def _pod(self, pod: dict[str, Any]) -> None:
        metadata = pod.get("metadata", {})
        uid, namespace, name = metadata.get("uid"), metadata.get("namespace"), metadata.get("name")
        if not (isinstance(uid, str) and isinstance(namespace, str) and isinstance(name, str)):
            return
        self._seen(uid)
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        if metadata.get("deletionTimestamp"):
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                    "preconditions": {"uid": uid}}
            self._client.call("DELETE", path, body).addErrback(
                lambda failure: None if failure.check(NotFound) else self._failed(failure))
        elif uid not in self._reported:
            self._reported.add(uid)
            self._client.call("PATCH", path + "/status", {"status": self._running_status(pod)},
                              content_type=MERGE_PATCH).addCallbacks(lambda _: self._running(uid), self._failed)

    def _failed(self, failure: Any) -> None:
        if not self._stopped:
            print(f"{self.name}: a call failed: {failure.value if failure.check(ApiError) else failure.getTraceback()}")

    def _running_status(self, pod: dict[str, Any]) -> dict[str, Any]:
        now = rfc3339(time.time())
        conditions = [{"type": kind, "status": "True", "lastTransitionTime": now}
                      for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
        containers = pod.get("spec", {}).get("containers", [{}])
        return {"phase": "Running", "conditions": conditions, "hostIP": self.address, "podIP": self.address,
                "startTime": now,
                "containerStatuses": [{"name": containers[0].get("name", "vm"), "ready": True, "restartCount": 0,
                                       "image": containers[0].get("image", ""), "imageID": "",
                                       "state": {"running": {"startedAt": now}},
                                       "containerID": f"vmservice://{pod['metadata']['name']}"}]}




def deployment(replicas: int) -> dict[str, Any]:
    """A Deployment of ``replicas`` VM pods for vmservice hosts."""
    labels = {"app": "scale"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "scale", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"nodeSelector": {"type": "vmservice"},
                                       "tolerations": [{"key": "vmservice.io/vm", "operator": "Exists"}],
                                       "containers": [{"name": "vm", "image": "vmservice.io/group/vm",
                                                       "resources": {"limits": {"vmservice.io/slots": "1"}}}]}}},
    }


def control_plane(directory: str, hosts: list[str]) -> dict[str, Any]:
    """Start a control plane in ``directory`` with identities for ``hosts``; its state."""
    result = subprocess.run([sys.executable, "-m", "vmservice.devcluster", "start", "--dir", directory,
                             "--ports", "auto", "--nodes", ",".join(hosts)],
                            capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError(f"the control plane did not start:\n{result.stdout}{result.stderr}")
    with open(os.path.join(directory, "state.json")) as f:
        state: dict[str, Any] = json.load(f)
    return state


def _client(reactor: Any, kubeconfig: str) -> ApiClient:
    view = load_kubeconfig(kubeconfig)
    assert view.ca_file is not None and view.token is not None
    with open(view.ca_file, "rb") as f:
        http = https_client(reactor, f.read())
    token = view.token
    return ApiClient(reactor, http, view.server, lambda: token, timeout=120)


async def _until(clock: IReactorTime, what: str, done: Callable[[], bool], started: float) -> float:
    """Seconds from ``started`` (monotonic) until ``done()``."""
    while not done():
        if time.monotonic() - started > PHASE_TIMEOUT:
            raise RuntimeError(f"{what}: not within {PHASE_TIMEOUT} s")
        await deferLater(clock, 0.05, lambda: None)
    return time.monotonic() - started


def _component_pids(state: dict[str, Any]) -> dict[str, int]:
    return {each["name"]: each["pid"] for each in state["processes"]}


async def scale(reactor: Any, options: argparse.Namespace, directory: str) -> dict[str, Any]:
    names = [f"sim-{i:03d}" for i in range(options.hosts)]
    starting = time.monotonic()
    state = control_plane(directory, names)
    start_s = time.monotonic() - starting
    pids = _component_pids(state)
    slots = -(-options.pods * 2 // options.hosts)  # room for every pod, twice over
    seen: set[str] = set()
    running: set[str] = set()
    hosts = [SimulatedHost(reactor, _client(reactor, os.path.join(directory, "nodes", f"{name}.kubeconfig")),
                           name, index, slots, seen.add, running.add) for index, name in enumerate(names)]
    admin = _client(reactor, os.path.join(directory, "admin.kubeconfig"))
    try:
        joined = time.monotonic()
        await DeferredList([Deferred.fromCoroutine(host.join()) for host in hosts], fireOnOneErrback=True,
                           consumeErrors=True)
        join_s = time.monotonic() - joined
        started = time.monotonic()
        await admin.call("POST", "/apis/apps/v1/namespaces/default/deployments", deployment(options.pods))
        scheduled_s = await _until(reactor, "scheduling", lambda: len(seen) >= options.pods, started)
        running_s = await _until(reactor, "running", lambda: len(running) >= options.pods, started)
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        await deferLater(reactor, options.idle, lambda: None)
        idle_cores = {name: (cpu_seconds(pid) - cpu_before[name]) / options.idle for name, pid in pids.items()}
        deleting = time.monotonic()
        await admin.call("DELETE", "/apis/apps/v1/namespaces/default/deployments/scale",
                         {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})

        async def remaining() -> int:
            listing = await admin.call("GET", "/api/v1/namespaces/default/pods?limit=1", kind="PodList")
            return len(listing.get("items", [])) + int(listing.get("metadata", {}).get("remainingItemCount") or 0)

        while await remaining():
            if time.monotonic() - deleting > PHASE_TIMEOUT:
                raise RuntimeError("deletion: not within the time")
            await deferLater(reactor, 0.2, lambda: None)
        deleted_s = time.monotonic() - deleting
        rss = {name: peak_rss(pid) for name, pid in pids.items()}
    finally:
        for host in hosts:
            host.stop()
    return {
        "hosts": options.hosts, "pods": options.pods, "slots_per_host": slots,
        "control_plane_start_s": start_s, "join_s": join_s,
        "scheduled_s": scheduled_s, "pods_bound_a_second": options.pods / scheduled_s,
        "running_s": running_s, "pods_running_a_second": options.pods / running_s,
        "deleted_s": deleted_s,
        "idle_seconds": options.idle,
        "idle_cores": {"apiserver": idle_cores["kube-apiserver"], "etcd": idle_cores["etcd"],
                       "scheduler": idle_cores["kube-scheduler"],
                       "controller_manager": idle_cores["kube-controller-manager"]},
        "peak_rss_bytes": {"apiserver": rss["kube-apiserver"], "etcd": rss["etcd"],
                           "scheduler": rss["kube-scheduler"], "controller_manager": rss["kube-controller-manager"]},
    }


PARTS = ("apply", "loss", "scale")


def _part_directory(top: str, part: str) -> str:
    return os.path.join(top, part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of: {', '.join(PARTS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=20.0)
    options = parser.parse_args()
    parts = options.parts.split(",")
    if set(parts) - set(PARTS) or not 1 <= options.hosts <= 1000 or options.pods < 1 or options.rounds < 1:
        parser.error(f"--parts takes {', '.join(PARTS)}; --hosts 1 to 1000; --pods and --rounds at least 1")
    run = begin()
    top = tempfile.mkdtemp(prefix="vms-bench-cluster-")
    result: dict[str, Any] = {"benchmark": "cluster", "parts": parts}

    async def measure(reactor: Any) -> None:
        result["scale"] = await scale(reactor, options, _part_directory(top, "scale"))

    try:
        # The parts with real daemons first: the reactor the simulated hosts run on cannot start twice.
        if "apply" in parts:
            result["apply"] = measure_apply(_part_directory(top, "apply"), control_plane, options.rounds)
        if "loss" in parts:
            result["loss"] = measure_loss(_part_directory(top, "loss"), control_plane)
        if "scale" in parts:
            try:
                react(lambda reactor: ensureDeferred(measure(reactor)))
            except SystemExit as exit:
                if exit.code:
                    raise
    finally:
        for part in parts:
            subprocess.run([sys.executable, "-m", "vmservice.devcluster", "stop", "--dir",
                            _part_directory(top, part), "--purge"], capture_output=True, timeout=120)
        shutil.rmtree(top, ignore_errors=True)
    write_result(RESULTS, result, run)
    if "apply" in result:
        for name, figures in result["apply"]["groups"].items():
            print(f"{name}: pod Ready {figures['pod_ready_s']['median']:.2f} s, API create "
                  f"{figures['api_create_s']['median']:.2f} s (ratio {figures['ratio_pod_ready_over_api_create']:.2f})")
    if "loss" in result:
        print(f"host lost: replacement Ready after {result['loss']['replacement_ready_s']:.1f} s, "
              f"reconciled {result['loss']['reconciled_s']:.1f} s after the restart")
    if "scale" in result:
        figures = result["scale"]
        print(f"{figures['hosts']} hosts, {figures['pods']} pods: scheduled in {figures['scheduled_s']:.1f} s "
              f"({figures['pods_bound_a_second']:.0f}/s), Running in {figures['running_s']:.1f} s, deleted in "
              f"{figures['deleted_s']:.1f} s; peak RSS apiserver {figures['peak_rss_bytes']['apiserver'] >> 20} MiB, "
              f"etcd {figures['peak_rss_bytes']['etcd'] >> 20} MiB")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
