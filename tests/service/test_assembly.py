# -*- test-case-name: tests.service.test_assembly -*-
"""
Tests for :mod:`vmservice.service.assembly`: the daemon's service tree from
a configuration, on a memory reactor (nothing is started, so no VM, socket
or process), and the code host's fetch.  The assembled daemon running for
real is tested in ``tests/integration/``.
"""

from __future__ import annotations

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.service.configured import ConfiguredCase
from vmservice.config import Config
from vmservice.errors import BadGateway
from vmservice.service import make_service
from vmservice.service.assembly import _codehost


class MakeServiceTests(ConfiguredCase):
    def test_tree(self) -> None:
        """
        The daemon is the fleet, the console logs' rotation and the stats sampler (inside the range claims)
        and the API listener, not started yet.
        """
        top = make_service(self.config(), MemoryReactorClock())
        names = sorted(type(service).__name__ for service in top)
        self.assertEqual(names, ["StreamServerEndpointService", "_Claimed"])
        [claimed] = [service for service in top if type(service).__name__ == "_Claimed"]
        self.assertEqual([service.name for service in claimed], ["fleet", "room-watch", "console-rotation", "stats-sampler"])
        self.assertFalse(top.running)

    def test_limits(self) -> None:
        """
        The listener's factory bounds the API's connections as configured
        (around the site); the buffer budget is sized from the host's RAM
        unless the configuration gives it.
        """
        import attrs

        from vmservice.api.connection_limits import ConnectionLimits
        from vmservice.config import LimitsConfig
        from vmservice.service.host import size_buffer_budget as _buffer_budget

        limits = LimitsConfig(buffer_budget=4 << 20, max_connections=8, max_connections_per_peer=3)
        config = attrs.evolve(self.config(), limits=limits)
        top = make_service(config, MemoryReactorClock())
        [listener] = [service for service in top if type(service).__name__ == "StreamServerEndpointService"]
        factory = listener.factory
        self.assertIsInstance(factory, ConnectionLimits)
        self.assertEqual((factory.most, factory.most_per_peer), (8, 3))
        self.assertEqual(type(factory.wrappedFactory).__name__, "StreamingSite")
        self.assertEqual(_buffer_budget(config).size, 4 << 20)
        self.assertGreaterEqual(_buffer_budget(self.config()).size, 64 << 20)

    def test_no_stats_sampler(self) -> None:
        """stats_interval 0: no sampling of the nodes' statistics for /metrics."""
        top = make_service(self.config(stats_interval=0), MemoryReactorClock())
        [claimed] = [service for service in top if type(service).__name__ == "_Claimed"]
        self.assertEqual([service.name for service in claimed], ["fleet", "room-watch", "console-rotation"])

    def test_cluster_node(self) -> None:
        """
        With a kubernetes: section the tree ends with the node's service, then its kubelet port (stopped
        first: no exec arrives while the node's controllers stop).
        """
        import attrs

        from tests.cluster.node_harness import kube_config, sample_certificate
        from vmservice.cluster.kubelet.site import KubeletListener
        from vmservice.cluster.node_service import NodeService

        config = attrs.evolve(self.config(), kubernetes=kube_config(ca_pem=sample_certificate()))
        top = make_service(config, MemoryReactorClock())
        self.assertIsInstance(list(top)[-2], NodeService)  # without the section: test_tree
        self.assertIsInstance(list(top)[-1], KubeletListener)


class CodehostTests(SynchronousTestCase):
    def test_disabled(self) -> None:
        """Without codehost_url there is nothing to fetch keys with (create answers not_supported)."""
        self.assertIsNone(_codehost(Config(codehost_url=None), MemoryReactorClock()))

    def test_fetch_on_the_reactor(self) -> None:
        """The keys are fetched from codehost_url over the daemon's reactor, within codehost_timeout."""
        reactor = MemoryReactorClock()
        fetch = _codehost(Config(codehost_url="http://127.0.0.1:8123", codehost_timeout=2.0), reactor)
        assert fetch is not None
        fetching = fetch("alice")
        self.assertEqual(reactor.tcpClients[0][:2], ("127.0.0.1", 8123))
        reactor.advance(1.9)
        self.assertNoResult(fetching)
        reactor.advance(0.2)
        error = self.failureResultOf(fetching, BadGateway).value
        self.assertEqual(str(error), "code host 127.0.0.1:8123 did not answer within 2 s")
