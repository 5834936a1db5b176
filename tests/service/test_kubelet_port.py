"""The kubelet port of a cluster node as the daemon wires it (:mod:`vmservice.service.kubelet_port`)."""

from __future__ import annotations

import datetime
import os
import stat

import attrs
from twisted.internet.testing import MemoryReactorClock

from tests.cluster.node_harness import kube_config, sample_certificate
from tests.service.configured import ConfiguredCase
from vmservice.cluster.kubelet.site import KubeletListener
from vmservice.service import make_service
from vmservice.service.kubelet_port import GENERATED_DIR, kubelet_tls

NOW = datetime.datetime(2026, 11, 29, tzinfo=datetime.timezone.utc)


class KubeletPortTests(ConfiguredCase):
    def test_listens_at_the_internal_ip(self) -> None:
        """Started, the kubelet port listens with TLS at the Node's InternalIP and kubelet port; stopped, no more."""
        reactor = MemoryReactorClock()
        config = attrs.evolve(self.config(), kubernetes=kube_config(ca_pem=sample_certificate(), kubelet_port=10311))
        listener = list(make_service(config, reactor))[-1]
        assert isinstance(listener, KubeletListener)
        listener.startService()
        port, _, _, _, interface = reactor.sslServers[0]
        self.assertEqual((port, interface), (10311, "10.0.0.5"))
        listener.stopService()
        self.assertIsNone(listener.listening)

    def test_generated_once_in_the_state_directory(self) -> None:
        """Without configured files the serving pair is made in <state_dir>/kubelet-tls (0700, key 0600), then kept."""
        config = attrs.evolve(self.config(), kubernetes=kube_config(ca_pem=sample_certificate()))
        assert config.kubernetes is not None
        kubelet_tls(config, config.kubernetes, NOW)
        directory = os.path.join(config.state_dir, GENERATED_DIR)
        self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o700)
        files = sorted(os.listdir(directory))
        self.assertTrue(files)
        for name in files:
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(directory, name)).st_mode) & 0o077, 0, name)
        before = {name: open(os.path.join(directory, name), "rb").read() for name in files}
        kubelet_tls(config, config.kubernetes, NOW + datetime.timedelta(days=1))
        self.assertEqual({name: open(os.path.join(directory, name), "rb").read() for name in files}, before)
