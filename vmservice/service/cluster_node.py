# -*- test-case-name: tests.service.test_cluster_node -*-
"""
The daemon as a node of a Kubernetes cluster, wired (when
``kubernetes.enabled``): the API client over treq with a TLS policy that
trusts the configured CA alone and the node's token (read again at a 401),
what the Node advertises from the host and admission, the controller's
metrics in ``/metrics``, and the service that runs the controller.
"""

from __future__ import annotations

import os
import platform
import random
import re

from treq.client import HTTPClient
from twisted.internet.ssl import Certificate, trustRootFromCertificates
from twisted.logger import Logger
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS

from .. import __version__
from ..cluster.api_client import ApiClient
from ..cluster.capacity import NodeBudget, derive, smallest_vm
from ..cluster.cluster_metrics import ClusterMetrics
from ..cluster.node_api import NodeApi
from ..cluster.node_controller import NodeController
from ..cluster.node_object import NodeInfo
from ..cluster.node_service import NodeService
from ..cluster.fleet_pods import FleetPods
from ..cluster.pod_api import PodApi
from ..cluster.pod_controller import PodController
from ..cluster.pod_spec import parse_spec
from ..config import Config, KubernetesConfig
from ..config.kubeconfig import read_token
from ..metrics import Metrics
from ..nodes.admission import Admission, mem_total
from ..quiet_pool import QuietPool
from ..nodes.fleet import Fleet
from ..secretstore import SecretStore
from ..version import go_platform
from .host import StartupError
from .reactor import IDaemonReactor

log = Logger(namespace="vmservice.service")

_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


def https_client(reactor: IDaemonReactor, ca_pem: bytes) -> HTTPClient:
    """
    A treq client whose HTTPS trusts the certificates of ``ca_pem`` alone
    (the server's name or address checked against its certificate), its
    connections kept for the next call and not logged.

    :raise StartupError: ``ca_pem`` holds no certificate OpenSSL reads.
    """
    try:
        certificates = [Certificate.loadPEM(block) for block in _PEM_CERTIFICATE.findall(ca_pem)]
        trust = trustRootFromCertificates(certificates)
    except Exception as error:
        raise StartupError(f"kubernetes: the CA cannot be read ({error})") from None
    if not certificates:
        raise StartupError("kubernetes: the CA holds no certificate")
    return HTTPClient(Agent(reactor, contextFactory=BrowserLikePolicyForHTTPS(trustRoot=trust), pool=QuietPool(reactor)))


def _first_line(path: str) -> str:
    """The first line of a small host file (``/etc/machine-id``), or ``""``."""
    try:
        with open(path, encoding="ascii", errors="replace") as stream:
            return stream.read(256).strip()
    except OSError:
        return ""


def host_info() -> NodeInfo:
    """What this host is, for the Node's ``nodeInfo``."""
    return NodeInfo(kernel_version=platform.release(), architecture=go_platform()[1], version=__version__,
                    machine_id=_first_line("/etc/machine-id"), boot_id=_first_line("/proc/sys/kernel/random/boot_id"))


def _host_memory() -> int | None:
    try:
        with open("/proc/meminfo") as stream:
            return mem_total(stream.read())
    except OSError:
        return None


def pod_controller(config: Config, kubernetes: KubernetesConfig, reactor: IDaemonReactor, client: ApiClient,
                   fleet: Fleet, secrets: SecretStore | None) -> PodController:
    """The pods bound to this Node, run as VMs of ``fleet`` (its events heard from now on)."""
    provider = FleetPods(reactor, fleet, secrets, kubernetes.node_name, kubernetes.pod_boot_timeout_seconds)
    groups = {group.name: group for group in config.host_groups}
    return PodController(reactor, PodApi(client), provider, kubernetes.node_name, kubernetes.internal_ip,
                         lambda pod: parse_spec(pod, groups, kubernetes), random.random)


def cluster_node(config: Config, kubernetes: KubernetesConfig, reactor: IDaemonReactor, admission: Admission,
                 metrics: Metrics, fleet: Fleet | None = None, secrets: SecretStore | None = None) -> NodeService:
    """
    The service that keeps this daemon's Node in the cluster and (with
    ``fleet``) runs the pods bound to it; its series join ``metrics``.
    """
    client = ApiClient(reactor, https_client(reactor, kubernetes.ca_pem), kubernetes.server,
                       lambda: read_token(kubernetes.token))
    capacity = derive(kubernetes.capacity, config, admission, os.cpu_count(), _host_memory())
    counts = ClusterMetrics()
    metrics.registry.register(counts)
    pods = None if fleet is None else pod_controller(config, kubernetes, reactor, client, fleet, secrets)
    registered: list[NodeService] = []
    controller = NodeController(reactor, NodeApi(client, kubernetes.node_name), kubernetes, capacity,
                                NodeBudget(admission, smallest_vm(config)).memory_pressure, host_info(), counts,
                                random.random, lambda: registered[0].pods_start())
    log.info("cluster node {name} of {server}: {cpu} CPUs, {memory} MiB, {pods} pods advertised",
             name=kubernetes.node_name, server=kubernetes.server, cpu=capacity.cpu, memory=capacity.memory // 2**20,
             pods=capacity.pods)
    service = NodeService(controller, pods)
    registered.append(service)
    return service


__all__ = ["cluster_node", "host_info", "https_client", "pod_controller"]
