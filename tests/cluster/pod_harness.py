"""
What the tests of the pod controller share: :class:`PodFakeApi` (the fake
API server with pods that can be read, patched and deleted, Secrets and
Events), :class:`FakeProvider` (VMs in memory whose creates the test
settles), :func:`pod` (a pod bound to ``vms-a``) and :class:`PodHarness`
(a controller over them on a clock).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from twisted.internet.defer import Deferred, succeed
from twisted.internet.testing import MemoryReactorClock
from twisted.web.server import Request

from tests.cluster.fake_api import FakeApi, fake_client, status
from vmservice.cluster.pod_api import PodApi
from vmservice.cluster.pod_controller import PodController
from vmservice.cluster.pod_object import PodKey
from vmservice.cluster.pod_provider import GONE, PodVm, VmPhase, VmState
from vmservice.cluster.pod_spec import PodSpec, parse_spec
from vmservice.config import HostGroupConfig, KubernetesConfig, TokenSource

GROUPS = {"vm": HostGroupConfig(name="vm", vcpu=2, ram_bytes=1024 * 2**20)}
CONFIG = KubernetesConfig(server="https://127.0.0.1:6443", ca_pem=b"", token=TokenSource(path="/nonexistent"),
                          node_name="vms-a", internal_ip="10.0.0.5", default_group="vm")
SCHEDULED = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": "2026-01-01T00:00:00Z"}


def pod(name: str = "web", uid: str | None = None, node: str = "vms-a", **spec: Any) -> dict[str, Any]:
    """A pod bound to ``node``, scheduled, with one container of image ``vm`` (``spec`` merged into its spec)."""
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                         "resourceVersion": "1"},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "vm"}], **spec},
            "status": {"phase": "Pending", "conditions": [SCHEDULED]}}


def pod_path(name: str, namespace: str = "default") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


class PodFakeApi(FakeApi):
    """The fake server, its pods both listed and reachable by path; DELETE and Events as the API answers them."""

    def add(self, item: dict[str, Any]) -> None:
        """A pod in the listing and at its path."""
        self.pods.append(item)
        self.objects[pod_path(item["metadata"]["name"], item["metadata"]["namespace"])] = item

    def render(self, request: Request) -> bytes | int:
        method, path = request.method.decode(), request.path.decode()
        if any(matches(method, path) for matches, _, _ in self.queued):
            return super().render(request)
        if method == "POST" and path.endswith("/events"):
            body = json.loads(request.content.read()) if request.content is not None else None
            self.requests.append((method, path, body))
            request.setResponseCode(201)
            return json.dumps({**(body or {}), "metadata": {"name": "e1"}}).encode()
        if method == "DELETE" and "/pods/" in path:
            body = json.loads(request.content.read()) if request.content is not None else None
            self.requests.append((method, path, body))
            current = self.objects.get(path)
            if current is None:
                request.setResponseCode(404)
                return status(404, "NotFound")
            if current["metadata"]["uid"] != (body or {}).get("preconditions", {}).get("uid"):
                request.setResponseCode(409)
                return status(409, "Conflict", "precondition failed")
            del self.objects[path]
            self.pods[:] = [p for p in self.pods if p is not current]
            return json.dumps({"kind": "Status", "status": "Success"}).encode()
        return super().render(request)

    def patches(self) -> list[dict[str, Any]]:
        """The status patches written, oldest first."""
        return [body["status"] for method, path, body in self.requests if method == "PATCH" and
                path.endswith("/status")]

    def events(self) -> list[str]:
        """The reasons of the Events posted."""
        return [body["reason"] for method, path, body in self.requests if method == "POST" and
                path.endswith("/events")]


class FakeProvider:
    """VMs in memory: a create waits for the test (:meth:`settle`) unless ``instant``."""

    def __init__(self, instant: bool = True) -> None:
        self.instant = instant
        self.vms_by_uid: dict[str, tuple[PodKey, VmState]] = {}
        self.created: list[tuple[PodSpec, tuple[tuple[str, str], ...]]] = []
        self.deleted: list[tuple[PodKey, float]] = []
        self.pending: list[tuple[PodSpec, Deferred[VmState]]] = []
        self.listeners: list[Callable[[str], None]] = []
        self.swept = 0
        self.outcome = VmState(VmPhase.RUNNING, "web", "10.240.0.2", 1_700_000_000.0)

    def create(self, spec: PodSpec, env: tuple[tuple[str, str], ...]) -> Deferred[VmState]:
        self.created.append((spec, env))
        if self.instant:
            return succeed(self._made(spec, self.outcome))
        waiting: Deferred[VmState] = Deferred()
        self.pending.append((spec, waiting))
        return waiting

    def _made(self, spec: PodSpec, state: VmState) -> VmState:
        if state.phase is not VmPhase.FAILED:
            self.vms_by_uid[spec.key.uid] = (spec.key, state)
        return state

    def settle(self, state: VmState | None = None) -> None:
        """The oldest create under way ends with ``state`` (the usual outcome when ``None``)."""
        spec, waiting = self.pending.pop(0)
        waiting.callback(self._made(spec, state or self.outcome))

    def delete(self, key: PodKey, grace: float) -> Deferred[None]:
        self.deleted.append((key, grace))
        self.vms_by_uid.pop(key.uid, None)
        return succeed(None)

    def state(self, key: PodKey) -> VmState:
        return self.vms_by_uid.get(key.uid, (key, GONE))[1]

    def hostname(self, key: PodKey) -> str | None:
        found = self.vms_by_uid.get(key.uid)
        return None if found is None else found[1].hostname

    def vms(self) -> list[PodVm]:
        return [PodVm(key, "vms-a", state) for key, state in self.vms_by_uid.values()]

    def notify(self, changed: Callable[[str], None]) -> Callable[[], None]:
        self.listeners.append(changed)
        return lambda: self.listeners.remove(changed)

    def sweep(self) -> None:
        self.swept += 1

    def change(self, uid: str, state: VmState) -> None:
        """Pod ``uid``'s VM is now ``state``; the controller is told."""
        key = self.vms_by_uid[uid][0]
        self.vms_by_uid[uid] = (key, state)
        for listener in list(self.listeners):
            listener(uid)


class PodHarness:
    """A controller of node ``vms-a`` over the fake server and a fake provider, on a clock."""

    def __init__(self, provider: FakeProvider | None = None) -> None:
        self.clock = MemoryReactorClock()
        self.clock.advance(1_700_000_100)
        self.api = PodFakeApi()
        self.client, self.stub = fake_client(self.clock, self.api)
        self.provider = provider or FakeProvider()
        self.controller = PodController(self.clock, PodApi(self.client), self.provider, "vms-a", "10.0.0.5",
                                        lambda item: parse_spec(item, GROUPS, CONFIG), lambda: 0.0)

    def start(self) -> None:
        self.controller.start()
        self.flush()

    def flush(self) -> None:
        for _ in range(5):
            self.stub.flush()

    def stop(self) -> None:
        self.controller.stop()
        self.flush()
        self.api.watchers.clear()


__all__ = ["CONFIG", "FakeProvider", "GROUPS", "PodFakeApi", "PodHarness", "SCHEDULED", "pod", "pod_path"]
