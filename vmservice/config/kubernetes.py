# -*- test-case-name: tests.config.test_kubernetes -*-
"""
The ``kubernetes:`` section: the daemon as a node of a Kubernetes cluster
(see ``docs/cluster.md``), as the file writes it
(:class:`KubernetesDocument`, with :class:`TaintConfig` and
:class:`CapacityConfig` read straight into their records) and as it means it
(:class:`KubernetesConfig`: the API server, its CA, where the node's token
is read from, the node's name, address, labels and taints).
"""

from __future__ import annotations

import attrs

from .values import Size

#: The default kubelet port advertised in the Node's ``daemonEndpoints``.
DEFAULT_KUBELET_PORT = 10250
#: A Lease's ``leaseDurationSeconds`` by default (the kubelet's).
DEFAULT_LEASE_DURATION = 40
#: Seconds between two renewals of the Lease by default (the kubelet's: a quarter of the duration).
DEFAULT_RENEW_INTERVAL = 10.0
#: Seconds between two status updates of the Node by default (the kubelet's ``nodeStatusUpdateFrequency``).
DEFAULT_STATUS_INTERVAL = 10.0
#: Seconds a pod's VM may take to boot until its agent answers, by default.
DEFAULT_POD_BOOT_TIMEOUT = 300.0
#: The taint effects Kubernetes knows.
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@attrs.frozen(kw_only=True)
class TaintConfig:
    """
    One entry of ``kubernetes.taints``: a taint of the Node.

    :ivar key: A qualified name (``vmservice.io/vm``).
    :ivar value: A label value (may be empty).
    :ivar effect: One of :data:`TAINT_EFFECTS`.
    """

    key: str
    value: str = ""
    effect: str = "NoSchedule"


#: The Node's taint unless ``taints`` says otherwise: only pods that tolerate it land.
DEFAULT_TAINTS = (TaintConfig(key="vmservice.io/vm", value="true", effect="NoSchedule"),)


@attrs.frozen(kw_only=True)
class CapacityConfig:
    """
    ``kubernetes.capacity``: what the Node advertises; each ``None`` is
    derived at start (see :mod:`vmservice.cluster.capacity`).

    :ivar cpu: Whole CPUs; ``None``: the host's CPU count.
    :ivar memory: Bytes; ``None``: admission's memory budget (or the host's RAM).
    :ivar pods: Pods (and ``vmservice.io/slots``); ``None``: as many VMs of
        the smallest group as the budget holds.
    """

    cpu: int | None = None
    memory: Size | None = None
    pods: int | None = None


@attrs.frozen(kw_only=True)
class KubernetesDocument:
    """
    The ``kubernetes:`` section key for key, as the file writes it: either
    ``kubeconfig`` or ``api_url`` with ``ca_file`` and ``token_file``.
    """

    enabled: bool = True
    kubeconfig: str | None = None
    api_url: str | None = None
    ca_file: str | None = None
    token_file: str | None = None
    node_name: str | None = None
    internal_ip: str | None = None
    kubelet_port: int = DEFAULT_KUBELET_PORT
    labels: dict[str, str] = attrs.field(factory=dict)
    taints: tuple[TaintConfig, ...] | None = None
    capacity: CapacityConfig = CapacityConfig()
    lease_duration_seconds: int = DEFAULT_LEASE_DURATION
    renew_interval_seconds: float = DEFAULT_RENEW_INTERVAL
    status_interval_seconds: float = DEFAULT_STATUS_INTERVAL
    default_group: str | None = None
    images: dict[str, str] = attrs.field(factory=dict)
    pod_boot_timeout_seconds: float = DEFAULT_POD_BOOT_TIMEOUT
    kubelet_cert_file: str | None = None
    kubelet_key_file: str | None = None
    kubelet_client_ca_file: str | None = None


@attrs.frozen(kw_only=True)
class TokenSource:
    """
    Where the node's bearer token is read (at start, and again when the API
    server answers 401: tokens rotate).

    :ivar path: The file.
    :ivar kubeconfig: True when ``path`` is a kubeconfig whose current
        user's ``token`` is the token; false when the file holds the token.
    """

    path: str
    kubeconfig: bool = False


@attrs.frozen(kw_only=True)
class KubernetesConfig:
    """
    The ``kubernetes:`` section resolved: the daemon is a node of the cluster.

    :ivar server: The API server's URL (``https://host:port``, no final ``/``).
    :ivar ca_pem: The PEM certificate(s) of the CA the server's certificate
        must chain to (the only ones trusted).
    :ivar token: Where the node's token is read.
    :ivar node_name: The Node's name (DNS-1123 subdomain).
    :ivar internal_ip: The Node's ``InternalIP`` address.
    :ivar kubelet_port: The port advertised as the kubelet endpoint.
    :ivar labels: The Node's labels (the defaults, then the file's), sorted by key.
    :ivar taints: The Node's taints.
    :ivar capacity: What the Node advertises (``None``: derived at start).
    :ivar lease_duration_seconds: The Lease's ``leaseDurationSeconds``.
    :ivar renew_interval_seconds: Seconds between two renewals of the Lease.
    :ivar status_interval_seconds: Seconds between two status updates.
    :ivar default_group: The host group of a pod that names none (by
        annotation or image); ``None``: such a pod fails.
    :ivar images: Container images and the host groups they name, sorted.
    :ivar pod_boot_timeout_seconds: Seconds a pod's VM may take until its
        agent answers (then the pod fails).
    :ivar kubelet_cert_file: The kubelet port's serving certificate (PEM);
        ``None``: one is made at the first start and kept in the state directory.
    :ivar kubelet_key_file: Its key (given with ``kubelet_cert_file``).
    :ivar kubelet_client_ca_file: The CA whose certificate the API server
        presents as the kubelet port's client (``--kubelet-client-certificate``);
        ``None``: any client may connect (then only the InternalIP should reach it).
    :ivar vmservice_api: Where the host's vmservice API is
        (``http://ADDRESS:PORT``, the Node's ``vmservice.io/api``
        annotation); empty when it listens on a UNIX socket.
    """

    server: str
    ca_pem: bytes
    token: TokenSource
    node_name: str
    internal_ip: str
    kubelet_port: int = DEFAULT_KUBELET_PORT
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[TaintConfig, ...] = DEFAULT_TAINTS
    capacity: CapacityConfig = CapacityConfig()
    lease_duration_seconds: int = DEFAULT_LEASE_DURATION
    renew_interval_seconds: float = DEFAULT_RENEW_INTERVAL
    status_interval_seconds: float = DEFAULT_STATUS_INTERVAL
    default_group: str | None = None
    images: tuple[tuple[str, str], ...] = ()
    pod_boot_timeout_seconds: float = DEFAULT_POD_BOOT_TIMEOUT
    kubelet_cert_file: str | None = None
    kubelet_key_file: str | None = None
    kubelet_client_ca_file: str | None = None
    vmservice_api: str = ""


__all__ = [
    "CapacityConfig", "DEFAULT_KUBELET_PORT", "DEFAULT_LEASE_DURATION", "DEFAULT_POD_BOOT_TIMEOUT", "DEFAULT_RENEW_INTERVAL",
    "DEFAULT_STATUS_INTERVAL", "DEFAULT_TAINTS", "KubernetesConfig", "KubernetesDocument", "TAINT_EFFECTS",
    "TaintConfig", "TokenSource",
]
