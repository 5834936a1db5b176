"""
What the tests of ``pod/NAME`` share: :class:`FakeKube`, an in-memory
Kubernetes API (answers by path, for :class:`~vmservice.client.kubeapi.KubeApi`
as its requester), :func:`vm_pod` and :func:`vmservice_node`, the objects it
usually holds, and :func:`pem_files`, a CA and a client certificate.
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives import serialization
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone

from vmservice.devcluster.certificates import KeyPair, issue, make_ca


class FakeResponse:
    """An answer whose whole body is delivered at once."""

    def __init__(self, code: int, body: bytes) -> None:
        self.code, self.body = code, body

    def deliverBody(self, protocol: Protocol) -> None:
        protocol.dataReceived(self.body)
        protocol.connectionLost(Failure(ResponseDone()))


class FakeKube:
    """
    The Kubernetes API in memory: ``objects`` by path (``/api/v1/...``),
    ``answers`` raw ``(status, body)`` by path, a 404 Status for anything else.
    ``requests`` records each ``(url, headers)``; ``hang`` leaves every answer
    pending; ``error`` fails every request with it.
    """

    def __init__(self, server: str = "https://127.0.0.1:6443") -> None:
        self.server = server
        self.objects: dict[str, dict[str, Any]] = {}
        self.answers: dict[str, tuple[int, bytes]] = {}
        self.requests: list[tuple[str, dict[Any, Any]]] = []
        self.hang = False
        self.error: Exception | None = None

    def get(self, url: str, /, **kwargs: Any) -> Deferred[Any]:
        self.requests.append((url, kwargs["headers"]))
        if self.error is not None:
            return fail(self.error)
        if self.hang:
            return Deferred()
        path = url[len(self.server):]
        if path in self.answers:
            return succeed(FakeResponse(*self.answers[path]))
        if path in self.objects:
            return succeed(FakeResponse(200, json.dumps(self.objects[path]).encode()))
        status = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                  "message": f"{path.rsplit('/', 1)[-1]} not found"}
        return succeed(FakeResponse(404, json.dumps(status).encode()))


def vm_pod(name: str = "web", namespace: str = "default", node: str | None = "vms-a",
           container: str | None = "vmservice://vm-3") -> dict[str, Any]:
    """A pod bound to ``node`` whose container is ``container`` (``None``: not bound, no container yet)."""
    pod: dict[str, Any] = {"kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": {},
                           "status": {"phase": "Running" if container else "Pending"}}
    if node is not None:
        pod["spec"]["nodeName"] = node
    if container is not None:
        pod["status"]["containerStatuses"] = [{"name": "vm", "containerID": container}]
    return pod


def vmservice_node(name: str = "vms-a", api: str | None = "http://127.0.0.1:8081") -> dict[str, Any]:
    """A Node whose ``vmservice.io/api`` annotation is ``api`` (``None``: an ordinary kubelet's)."""
    annotations = {} if api is None else {"vmservice.io/api": api}
    return {"kind": "Node", "metadata": {"name": name, "annotations": annotations}}


def pem_files() -> tuple[bytes, bytes, bytes]:
    """A CA's certificate, a client certificate it signed, and that certificate's key (PEM)."""
    ca = make_ca()
    issued = issue(ca, KeyPair("user", "user", "system:masters", server=False, client=True))
    def certificate(value: Any) -> bytes:
        return value.public_bytes(serialization.Encoding.PEM)  # type: ignore[no-any-return]
    key = issued.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())
    return certificate(ca.certificate), certificate(issued.certificate), key
