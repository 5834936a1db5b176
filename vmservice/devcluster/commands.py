# -*- test-case-name: tests.devcluster.test_commands -*-
"""
The command line of each component of the development control plane, from its :class:`Layout`.

Everything listens on 127.0.0.1 only. etcd speaks TLS to its one client (the API server, by
certificate) and to itself as a peer; the API server authenticates by static token (and client
certificate), authorizes with the Node authorizer and RBAC, confines hosts with NodeRestriction, and
needs no endpoint reconciler for a loopback address; the scheduler and the controller-manager serve no
plain port and elect no leader; they serve with certificates of the CA, and the controller-manager looks
for volume plugins in the directory, not in ``/usr/libexec`` (which it would create). The controller-manager notices a silent node within 10 s
(``--node-monitor-grace-period``) and the API server's default tolerations let its pods be evicted 2 s
later, so that tests of a lost host are quick. The controller-manager may send 50 requests a second
(``--kube-api-qps``, burst 100) where its default is 20.
"""

from __future__ import annotations

import os

from attrs import frozen

from vmservice.devcluster.ports import LOOPBACK, Ports

__all__ = ["COMPONENTS", "Layout", "command_lines"]

#: The components, in the order they are started.
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")

#: The service addresses of the cluster (no service is reachable: there is no proxy).
SERVICE_RANGE = "10.0.0.0/24"


@frozen
class Layout:
    """
    Where one control plane's programs and files are.

    :ivar directory: the control plane's directory (certificates, tokens, kubeconfigs, etcd data, logs).
    :ivar bin_dir: the cache entry's ``bin/``.
    :ivar ports: its loopback ports.
    """

    directory: str
    bin_dir: str
    ports: Ports

    def path(self, name: str) -> str:
        """The file ``name`` of the directory."""
        return os.path.join(self.directory, name)

    @property
    def api_url(self) -> str:
        """The API server's URL."""
        return f"https://{LOOPBACK}:{self.ports.apiserver}"


def _etcd(layout: Layout) -> list[str]:
    client = f"https://{LOOPBACK}:{layout.ports.etcd_client}"
    peer = f"https://{LOOPBACK}:{layout.ports.etcd_peer}"
    tls = [f"--cert-file={layout.path('etcd.crt')}", f"--key-file={layout.path('etcd.key')}",
           f"--trusted-ca-file={layout.path('ca.crt')}", "--client-cert-auth",
           f"--peer-cert-file={layout.path('etcd.crt')}", f"--peer-key-file={layout.path('etcd.key')}",
           f"--peer-trusted-ca-file={layout.path('ca.crt')}", "--peer-client-cert-auth"]
    return [os.path.join(layout.bin_dir, "etcd"), "--name=default", f"--data-dir={layout.path('etcd')}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--initial-cluster-state=new", *tls]


def _apiserver(layout: Layout) -> list[str]:
    path = layout.path
    return [
        os.path.join(layout.bin_dir, "kube-apiserver"),
        f"--etcd-servers=https://{LOOPBACK}:{layout.ports.etcd_client}", f"--etcd-cafile={path('ca.crt')}",
        f"--etcd-certfile={path('apiserver-etcd-client.crt')}", f"--etcd-keyfile={path('apiserver-etcd-client.key')}",
        f"--bind-address={LOOPBACK}", f"--advertise-address={LOOPBACK}", f"--secure-port={layout.ports.apiserver}",
        "--insecure-port=0", f"--tls-cert-file={path('apiserver.crt')}", f"--tls-private-key-file={path('apiserver.key')}",
        f"--client-ca-file={path('ca.crt')}", f"--token-auth-file={path('tokens.csv')}",
        "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
        "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={path('sa.pub')}",
        f"--service-account-signing-key-file={path('sa.key')}", f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--endpoint-reconciler-type=none", "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={path('kubelet-client.crt')}", f"--kubelet-client-key={path('kubelet-client.key')}",
        "--default-unreachable-toleration-seconds=2", "--default-not-ready-toleration-seconds=2",
        "--profiling=false",
    ]


def _scheduler(layout: Layout) -> list[str]:
    return [os.path.join(layout.bin_dir, "kube-scheduler"), f"--kubeconfig={layout.path('scheduler.kubeconfig')}",
            "--leader-elect=false", "--port=0", f"--bind-address={LOOPBACK}",
            f"--secure-port={layout.ports.scheduler}", f"--tls-cert-file={layout.path('scheduler.crt')}",
            f"--tls-private-key-file={layout.path('scheduler.key')}", "--profiling=false"]


def _controller_manager(layout: Layout) -> list[str]:
    path = layout.path
    return [
        os.path.join(layout.bin_dir, "kube-controller-manager"), f"--kubeconfig={path('controller-manager.kubeconfig')}",
        "--leader-elect=false", "--port=0", f"--bind-address={LOOPBACK}",
        f"--secure-port={layout.ports.controller_manager}", f"--tls-cert-file={path('controller-manager.crt')}",
        f"--tls-private-key-file={path('controller-manager.key')}", f"--flex-volume-plugin-dir={path('flexvolume')}",
        "--use-service-account-credentials", f"--service-account-private-key-file={path('sa.key')}",
        f"--root-ca-file={path('ca.crt')}", f"--cluster-signing-cert-file={path('ca.crt')}",
        f"--cluster-signing-key-file={path('ca.key')}", "--node-monitor-period=2s",
        "--node-monitor-grace-period=10s", "--profiling=false",
        # Its default of 20 requests a second (burst 30) paces a ReplicaSet of a thousand pods to about a minute.
        "--kube-api-qps=50", "--kube-api-burst=100",
    ]


def command_lines(layout: Layout) -> dict[str, list[str]]:
    """``{component: argv}`` for each of :data:`COMPONENTS`."""
    return {"etcd": _etcd(layout), "kube-apiserver": _apiserver(layout), "kube-scheduler": _scheduler(layout),
            "kube-controller-manager": _controller_manager(layout)}
