# -*- test-case-name: tests.config.test_kubernetes -*-
"""
Checking and resolving the ``kubernetes:`` section (step 2 of loading):
:class:`KubernetesChecks`, which the :class:`~vmservice.config.resolve.Resolver`
is made with.  The files it names are read here (the CA, the token once, a
kubeconfig), so that a node that cannot authenticate fails at start, with
the key at fault.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse
from typing import Any

from ..structuring import Path
from .checks import Checks
from .kubeconfig import KubeconfigError, load_kubeconfig, read_limited, read_token
from .kubernetes import DEFAULT_TAINTS, CapacityConfig, TAINT_EFFECTS, KubernetesConfig, KubernetesDocument, TaintConfig, TokenSource
from .model import ApiConfig
from .units import MiB

#: A DNS-1123 subdomain (a Node's name, a label key's prefix): at most 253 characters.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
#: A label value or the name part of a label key: at most 63 characters.
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
#: The most bytes of a CA bundle read.
MAX_CA = 1024 * 1024
#: The longest Lease, and the longest interval between status updates, in seconds.
MAX_LEASE_DURATION, MAX_STATUS_INTERVAL = 3600, 300.0
#: The longest container image name ``images`` maps, and the longest boot of a pod's VM (seconds).
MAX_IMAGE_NAME, MAX_POD_BOOT_TIMEOUT = 512, 3600.0
#: Labels a node may set on itself under NodeRestriction, of the ``kubernetes.io`` and ``k8s.io`` namespaces.
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
})


def subdomain_problem(text: str) -> str | None:
    """Why ``text`` is not a DNS-1123 subdomain, or ``None``."""
    if len(text) > 253 or not DNS_SUBDOMAIN.fullmatch(text):
        return "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"
    return None


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a qualified name (``[prefix/]name``, a label's or a taint's key), or ``None``."""
    prefix, _, name = key.rpartition("/")
    if (prefix and subdomain_problem(prefix)) or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (f"bad key {key!r} (expected [prefix/]name: a DNS subdomain, then at most 63 letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit)")
    return None


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a label key a node may set on itself (NodeRestriction's rules), or ``None``."""
    problem = qualified_name_problem(key)
    if problem is not None:
        return problem
    prefix = key.rpartition("/")[0]
    if prefix == "node-restriction.kubernetes.io" or prefix.endswith(".node-restriction.kubernetes.io"):
        return f"key {key!r}: node-restriction.kubernetes.io labels are for administrators, not nodes"
    kubernetes = prefix in ("kubernetes.io", "k8s.io") or prefix.endswith((".kubernetes.io", ".k8s.io"))
    own = prefix.endswith(("kubelet.kubernetes.io", "node.kubernetes.io"))
    if kubernetes and not own and key not in KUBELET_LABELS:
        return f"key {key!r}: NodeRestriction refuses kubernetes.io and k8s.io labels a kubelet may not set"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a label value, or ``None``."""
    if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
        return (f"bad value {value!r} (at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
                "letter or digit)")
    return None


def default_labels(node_name: str) -> dict[str, str]:
    """The labels of every vmservice Node, before the file's."""
    labels = {"type": "vmservice", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "node.kubernetes.io/instance-type": "vmservice"}
    if label_value_problem(node_name) is None:
        labels["kubernetes.io/hostname"] = node_name
    return labels


def vmservice_api(api: ApiConfig, internal_ip: str) -> str:
    """The host's vmservice API as a URL (the InternalIP for a wildcard address); empty for a UNIX socket."""
    try:
        bound = ipaddress.ip_address(api.bind_address)
    except ValueError:
        return ""
    host = ipaddress.ip_address(internal_ip) if bound.is_unspecified else bound
    return f"http://{host}:{api.port}" if host.version == 4 else f"http://[{host}]:{api.port}"


class KubernetesChecks(Checks):
    """The checks of the ``kubernetes:`` section."""

    def kubernetes(self, document: KubernetesDocument | None, parts: Path, api: ApiConfig,
                   groups: tuple[str, ...] = ()) -> KubernetesConfig | None:
        """
        The section resolved; ``None`` when absent or not enabled (the daemon
        is no cluster node).  ``groups`` are the configured host groups' names
        (those ``default_group`` and ``images`` may name).
        """
        if document is None or not document.enabled:
            return None
        server, ca_pem, token = self.credentials(document, parts)
        node_name = self.node_name(document.node_name, (*parts, "node_name"))
        if not 1 <= document.kubelet_port <= 65535:
            raise self.error((*parts, "kubelet_port"), f"kubelet_port {document.kubelet_port} out of range (1-65535)")
        labels = default_labels(node_name)
        for key, value in document.labels.items():
            problem = label_key_problem(key) or label_value_problem(value)
            if problem is not None:
                raise self.error((*parts, "labels", key), problem)
            labels[key] = value
        lease, renew, status = self.timing(document, parts)
        internal_ip = self.internal_ip(document.internal_ip, api, (*parts, "internal_ip"))
        taints = DEFAULT_TAINTS if document.taints is None else tuple(
            self.taint(taint, (*parts, "taints", index)) for index, taint in enumerate(document.taints))
        return KubernetesConfig(
            server=server, ca_pem=ca_pem, token=token, node_name=node_name,
            internal_ip=internal_ip, vmservice_api=vmservice_api(api, internal_ip),
            kubelet_port=document.kubelet_port, labels=tuple(sorted(labels.items())), taints=taints,
            capacity=self.capacity(document, (*parts, "capacity")),
            lease_duration_seconds=lease, renew_interval_seconds=renew, status_interval_seconds=status,
            **self.pods(document, parts, groups), **self.kubelet_files(document, parts),
        )

    def kubelet_files(self, document: KubernetesDocument, parts: Path) -> dict[str, Any]:
        """The kubelet port's certificate, key and client CA files, each readable; the pair given together."""
        files: dict[str, str | None] = {"kubelet_cert_file": document.kubelet_cert_file, "kubelet_key_file": document.kubelet_key_file,
                 "kubelet_client_ca_file": document.kubelet_client_ca_file}
        if (files["kubelet_cert_file"] is None) != (files["kubelet_key_file"] is None):
            raise self.error((*parts, "kubelet_cert_file"), "give kubelet_cert_file and kubelet_key_file together")
        for key, path in files.items():
            if path is not None:
                try:
                    read_limited(path, MAX_CA)
                except (OSError, KubeconfigError) as error:
                    raise self.error((*parts, key), f"cannot read {path}: "
                                     f"{getattr(error, 'strerror', None) or error}") from None
        return files

    def pods(self, document: KubernetesDocument, parts: Path, groups: tuple[str, ...]) -> dict[str, Any]:
        """``default_group``, ``images`` and ``pod_boot_timeout_seconds``, checked: each group a configured one."""
        for where, group in ((("default_group",), document.default_group),
                             *((("images", image), group) for image, group in document.images.items())):
            if group is not None and group not in groups:
                raise self.error((*parts, *where), f"no host group {group!r} (configured: {', '.join(groups) or 'none'})")
        for image in document.images:
            if not image or len(image) > MAX_IMAGE_NAME or not image.isprintable():
                raise self.error((*parts, "images"), f"bad image name {image[:60]!r} (1 to {MAX_IMAGE_NAME} printable "
                                                     "characters)")
        timeout = document.pod_boot_timeout_seconds
        if not 0 < timeout <= MAX_POD_BOOT_TIMEOUT:
            raise self.error((*parts, "pod_boot_timeout_seconds"), f"pod_boot_timeout_seconds {timeout:g} must be more "
                                                                   f"than 0 and at most {MAX_POD_BOOT_TIMEOUT:g}")
        return {"default_group": document.default_group, "images": tuple(sorted(document.images.items())),
                "pod_boot_timeout_seconds": timeout}

    def credentials(self, document: KubernetesDocument, parts: Path) -> tuple[str, bytes, TokenSource]:
        """The server, the CA's PEM and the token's source: from ``kubeconfig``, or ``api_url``, ``ca_file``, ``token_file``."""
        direct = {"api_url": document.api_url, "ca_file": document.ca_file, "token_file": document.token_file}
        if document.kubeconfig is not None:
            given = [key for key, value in direct.items() if value is not None]
            if given:
                raise self.error((*parts, given[0]), "give either kubeconfig or api_url, ca_file and token_file")
            return self.kubeconfig(document.kubeconfig, (*parts, "kubeconfig"))
        for key, value in direct.items():
            if value is None:
                raise self.error((*parts, key), "required key missing (or give kubeconfig instead)")
        assert document.api_url is not None and document.ca_file is not None and document.token_file is not None
        token = TokenSource(path=document.token_file)
        self.readable_token(token, (*parts, "token_file"))
        return (self.api_url(document.api_url, (*parts, "api_url")),
                self.ca(document.ca_file, (*parts, "ca_file")), token)

    def kubeconfig(self, path: str, parts: Path) -> tuple[str, bytes, TokenSource]:
        """What the kubeconfig at ``path`` gives: its server, its CA's PEM and its token's source."""
        try:
            view = load_kubeconfig(path)
        except (OSError, KubeconfigError) as error:
            raise self.error(parts, f"{path}: {getattr(error, 'strerror', None) or error}") from None
        if view.ca_data is not None:
            ca_pem = self.pem(view.ca_data, parts)
        else:
            assert view.ca_file is not None
            ca_pem = self.ca(view.ca_file, parts)
        token = TokenSource(path=path, kubeconfig=True) if view.token_file is None else TokenSource(path=view.token_file)
        self.readable_token(token, parts)
        return self.api_url(view.server, parts), ca_pem, token

    def readable_token(self, source: TokenSource, parts: Path) -> None:
        """A token can be read from ``source`` now."""
        try:
            read_token(source)
        except (OSError, KubeconfigError) as error:
            raise self.error(parts, f"cannot read the token: {getattr(error, 'strerror', None) or error}") from None

    def ca(self, path: str, parts: Path) -> bytes:
        """The PEM of the CA file ``path``."""
        try:
            data = read_limited(path, MAX_CA)
        except (OSError, KubeconfigError) as error:
            raise self.error(parts, f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
        return self.pem(data, parts)

    def pem(self, data: bytes, parts: Path) -> bytes:
        """``data`` if it holds a PEM certificate."""
        if b"-----BEGIN CERTIFICATE-----" not in data or b"-----END CERTIFICATE-----" not in data:
            raise self.error(parts, "the CA holds no PEM certificate")
        return data

    def api_url(self, url: str, parts: Path) -> str:
        """An ``https://host[:port]`` URL without credentials, query or fragment, its final ``/`` dropped."""
        try:
            split = urllib.parse.urlsplit(url)
            _ = split.port
        except ValueError:
            split = None
        if (split is None or split.scheme != "https" or not split.hostname or split.username is not None
                or split.query or split.fragment or split.path.strip("/") or url != url.strip()):
            raise self.error(parts, f"bad API server URL {url!r} (expected https://host[:port], e.g. "
                                    "https://127.0.0.1:6443)")
        return url.rstrip("/")

    def node_name(self, name: str | None, parts: Path) -> str:
        """The Node's name: the file's, else the host's name (lowercased)."""
        if name is None:
            host = socket.gethostname().lower()
            if subdomain_problem(host) is None:
                return host
            raise self.error(parts, f"the host name {host!r} is not a DNS-1123 subdomain: set node_name")
        problem = subdomain_problem(name)
        if problem is not None:
            raise self.error(parts, f"bad node name {name!r}: {problem}")
        return name

    def internal_ip(self, address: str | None, api: ApiConfig, parts: Path) -> str:
        """The Node's InternalIP: the file's, else the API's bind address when it is a single IP address."""
        if address is None:
            try:
                bound = ipaddress.ip_address(api.bind_address)
            except ValueError:
                raise self.error(parts, "required when api.bind_address is a UNIX socket") from None
            if bound.is_unspecified:
                raise self.error(parts, f"required when api.bind_address is {api.bind_address}")
            return bound.compressed
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            raise self.error(parts, f"bad address {address!r} (expected an IP address)") from None
        if ip.is_unspecified:
            raise self.error(parts, f"{address} is no address a control plane can reach")
        return ip.compressed

    def taint(self, taint: TaintConfig, parts: Path) -> TaintConfig:
        """A taint, checked."""
        problem = qualified_name_problem(taint.key)
        if problem is not None:
            raise self.error((*parts, "key"), problem)
        problem = label_value_problem(taint.value)
        if problem is not None:
            raise self.error((*parts, "value"), problem)
        self.one_of(taint.effect, TAINT_EFFECTS, "taint effect", (*parts, "effect"))
        return taint

    def capacity(self, document: KubernetesDocument, parts: Path) -> CapacityConfig:
        """``capacity``, checked (as read: what is not given is derived at start)."""
        capacity = document.capacity
        for key, value, least in (("cpu", capacity.cpu, 1), ("memory", capacity.memory, MiB), ("pods", capacity.pods, 1)):
            if value is not None and not least <= value <= (1 << 50):
                raise self.error((*parts, key), f"{key} {value} must be at least {least}")
        return capacity

    def timing(self, document: KubernetesDocument, parts: Path) -> tuple[int, float, float]:
        """The Lease's duration and the intervals, checked."""
        lease, renew, status = (document.lease_duration_seconds, document.renew_interval_seconds,
                                document.status_interval_seconds)
        if not 1 <= lease <= MAX_LEASE_DURATION:
            raise self.error((*parts, "lease_duration_seconds"), f"lease_duration_seconds {lease} must be from 1 "
                                                                 f"to {MAX_LEASE_DURATION}")
        if not 0 < renew < lease:
            raise self.error((*parts, "renew_interval_seconds"), f"renew_interval_seconds {renew:g} must be more "
                                                                 f"than 0 and less than lease_duration_seconds ({lease})")
        if not 0 < status <= MAX_STATUS_INTERVAL:
            raise self.error((*parts, "status_interval_seconds"), f"status_interval_seconds {status:g} must be more "
                                                                  f"than 0 and at most {MAX_STATUS_INTERVAL:g}")
        return lease, renew, status
