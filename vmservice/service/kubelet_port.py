# -*- test-case-name: tests.service.test_kubelet_port -*-
"""
The kubelet port of a cluster node, wired: the kubelet API
(:mod:`vmservice.cluster.kubelet`: ``kubectl logs`` and ``kubectl exec``)
over the fleet's guests and consoles, the pods named by the pod
controller, TLS from the ``kubernetes:`` section (or made once into the
state directory), listened on at the Node's InternalIP and kubelet port.
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Callable

from ..cluster.kubelet.site import KubeletListener, kubelet_site
from ..cluster.kubelet.tls import KubeletTls, KubeletTlsConfig
from ..cluster.pod_controller import PodController
from ..cluster.pod_resolver import PodResolver
from ..config import Config, KubernetesConfig
from ..nodes.blocking import Blocking
from ..nodes.fleet import Fleet
from ..nodes.paths import NodePaths
from .reactor import IDaemonReactor

#: Where a kubelet certificate the daemon made is kept, under the state directory.
GENERATED_DIR = "kubelet-tls"


def kubelet_tls(config: Config, kubernetes: KubernetesConfig, now: datetime.datetime) -> KubeletTls:
    """The kubelet port's TLS: the configured files, or a pair made once for the node's name and address."""
    return KubeletTls(KubeletTlsConfig(
        kubernetes.node_name, kubernetes.internal_ip, socket.gethostname(),
        os.path.join(config.state_dir, GENERATED_DIR), kubernetes.kubelet_cert_file, kubernetes.kubelet_key_file,
        kubernetes.kubelet_client_ca_file), now)


def console_paths(config: Config, fleet: Fleet) -> Callable[[str], str]:
    """A VM's console log by hostname; :class:`~vmservice.errors.NotFound` when ``fleet`` has no such VM."""

    def console_path(hostname: str) -> str:
        fleet.node(hostname)
        return NodePaths.of(os.path.join(config.state_dir, "nodes", hostname)).console

    return console_path


def kubelet_listener(config: Config, kubernetes: KubernetesConfig, reactor: IDaemonReactor, fleet: Fleet,
                     pods: PodController, blocking: Blocking) -> KubeletListener:
    """The kubelet API of this node's pods, listened on while the service runs."""
    console_path = console_paths(config, fleet)
    tls = kubelet_tls(config, kubernetes, datetime.datetime.now(datetime.timezone.utc))
    site = kubelet_site(reactor, PodResolver(pods), fleet, console_path, config.console_log_size, blocking, tls)
    return KubeletListener(reactor, site, tls, kubernetes.internal_ip, kubernetes.kubelet_port)


__all__ = ["GENERATED_DIR", "console_paths", "kubelet_listener", "kubelet_tls"]
