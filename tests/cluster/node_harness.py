"""
What the tests of the node controller share: a :class:`NodeHarness` (the
fake API server, a clock, a controller of node ``vms-a`` over them) and
:func:`kube_config`, a resolved ``kubernetes:`` section.
"""

from __future__ import annotations

import os
from typing import Any

import twisted.test

import attrs
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock

from tests.cluster.fake_api import LEASES, SERVER, FakeApi, fake_client
from vmservice.cluster.api_client import ApiClient
from vmservice.cluster.capacity import Capacity
from vmservice.cluster.cluster_metrics import ClusterMetrics
from vmservice.cluster.node_api import NodeApi
from vmservice.cluster.node_controller import NodeController
from vmservice.cluster.node_object import NodeInfo
from vmservice.config import KubernetesConfig, TokenSource

NODE = "/api/v1/nodes/vms-a"
#: A certificate (and its key) shipped with Twisted's tests.
SERVER_PEM = os.path.join(os.path.dirname(twisted.test.__file__), "server.pem")
LEASE = f"{LEASES}/vms-a"


def kube_config(**changes: Any) -> KubernetesConfig:
    """A resolved section for node ``vms-a`` at 10.0.0.5, with ``changes``."""
    config = KubernetesConfig(server=SERVER, ca_pem=b"", token=TokenSource(path="/nonexistent"), node_name="vms-a",
                              internal_ip="10.0.0.5", labels=(("type", "vmservice"),))
    return attrs.evolve(config, **changes)


def sample_certificate() -> bytes:
    """The PEM of a certificate OpenSSL reads (Twisted's test server's)."""
    with open(SERVER_PEM, "rb") as stream:
        text = stream.read()
    start = text.index(b"-----BEGIN CERTIFICATE-----")
    end = text.index(b"-----END CERTIFICATE-----") + len(b"-----END CERTIFICATE-----")
    return text[start:end] + b"\n"


class Refusing:
    """An HTTP client whose connections are refused while :attr:`refusing`, else it asks ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.refusing = inner, False

    def request(self, method: str, url: str, **kwargs: Any) -> Deferred[Any]:
        if self.refusing:
            return fail(ConnectionRefusedError("connection refused"))
        result: Deferred[Any] = self.inner.request(method, url, **kwargs)
        return result


class NodeHarness:
    """A controller of ``vms-a`` against a :class:`FakeApi`, on a clock starting at 1,700,000,000."""

    def __init__(self, config: KubernetesConfig | None = None, max_body: int = 4 * 1024 * 1024) -> None:
        self.clock = MemoryReactorClock()
        self.clock.advance(1_700_000_000)
        self.api = FakeApi()
        self.token = "token-1"
        _, stub = fake_client(self.clock, self.api)
        self.http = Refusing(stub)
        self.client = ApiClient(self.clock, self.http, SERVER, lambda: self.token, max_body=max_body)
        self.pressure = False
        self.metrics = ClusterMetrics()
        self.config = config or kube_config()
        self.controller = NodeController(self.clock, NodeApi(self.client, "vms-a"), self.config,
                                         Capacity(cpu=4, memory=8 * 2**30, pods=16), lambda: self.pressure,
                                         NodeInfo("6.1.0-test", "amd64", "0.9.0", "m-id", "b-id"), self.metrics,
                                         lambda: 0.0)

    @property
    def node(self) -> dict[str, Any]:
        """The Node as the server holds it."""
        return self.api.objects[NODE]

    @property
    def lease(self) -> dict[str, Any]:
        """The Lease as the server holds it."""
        return self.api.objects[LEASE]

    def calls(self, method: str, fragment: str = "") -> list[Any]:
        """The bodies of the requests ``method`` whose path holds ``fragment``."""
        return [body for m, path, body in self.api.requests if m == method and fragment in path]


__all__ = ["LEASE", "NODE", "NodeHarness", "Refusing", "kube_config", "sample_certificate"]
