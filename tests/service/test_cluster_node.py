"""
Tests for :mod:`vmservice.service.cluster_node`: the node's service wired
from the configuration (the TLS trust, the metrics, what the host is).
"""

from __future__ import annotations

import os

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster.node_harness import kube_config, sample_certificate
from vmservice.cluster.node_service import NodeService
from vmservice.config import Config
from vmservice.metrics import Metrics
from vmservice.nodes.admission import Admission
from vmservice.service.cluster_node import cluster_node, host_info, https_client
from vmservice.service.host import StartupError

class ClusterNodeTests(SynchronousTestCase):
    """The cluster node's parts."""

    def test_https_client(self) -> None:
        """A CA OpenSSL reads gives a client; one it does not is a StartupError."""
        self.assertIsNotNone(https_client(MemoryReactorClock(), sample_certificate()))
        bad = b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
        self.assertRaises(StartupError, https_client, MemoryReactorClock(), bad)
        self.assertRaises(StartupError, https_client, MemoryReactorClock(), b"nothing")

    def test_service_and_metrics(self) -> None:
        """The service runs a controller; its series are in /metrics at 0."""
        metrics = Metrics()
        config = kube_config(ca_pem=sample_certificate())
        service = cluster_node(Config(kubernetes=config), config, MemoryReactorClock(), Admission.unlimited(), metrics)
        self.assertIsInstance(service, NodeService)
        text = metrics.render()[0].decode()
        for line in ("vmservice_cluster_lease_renewals_total 0.0", 'vmservice_cluster_failures_total{call="lease"} 0.0',
                     "vmservice_cluster_lease_last_renewal_timestamp_seconds 0.0"):
            self.assertIn(line, text)

    def test_host_info(self) -> None:
        """What the host is: linux, its kernel, the version in kubeletVersion."""
        document = host_info().document()
        self.assertEqual(document["operatingSystem"], "linux")
        self.assertEqual(document["kernelVersion"], os.uname().release)
        self.assertTrue(document["kubeletVersion"].startswith("v1.20.2-vmservice-"))
