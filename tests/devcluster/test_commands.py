"""
Tests for :mod:`vmservice.devcluster.commands`: each component's command line.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.commands import COMPONENTS, Layout, command_lines
from vmservice.devcluster.ports import Ports

LAYOUT = Layout("/d", "/cache/entry/bin", Ports(20000, 20001, 20002, 20003, 20004))


def flags(argv: list[str]) -> dict[str, str]:
    """``{--flag: value}`` of ``argv`` (a flag without ``=`` maps to ``""``)."""
    return dict((arg.partition("=")[0], arg.partition("=")[2]) for arg in argv[1:])


class CommandLineTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.lines = command_lines(LAYOUT)

    def test_programs(self) -> None:
        """Every component runs from the entry's bin/."""
        self.assertEqual(list(self.lines), list(COMPONENTS))
        for name, argv in self.lines.items():
            self.assertEqual(argv[0], f"/cache/entry/bin/{name}")

    def test_loopback_only(self) -> None:
        """Every address a component listens on or advertises is 127.0.0.1."""
        for argv in self.lines.values():
            for arg in argv:
                if "127." in arg or "address" in arg or "url" in arg.lower():
                    self.assertNotIn("0.0.0.0", arg)
        bound = {name: flags(self.lines[name])["--bind-address"]
                 for name in ("kube-apiserver", "kube-scheduler", "kube-controller-manager")}
        self.assertEqual(set(bound.values()), {"127.0.0.1"})
        etcd = flags(self.lines["etcd"])
        self.assertEqual([etcd["--listen-client-urls"], etcd["--listen-peer-urls"]],
                         ["https://127.0.0.1:20001", "https://127.0.0.1:20002"])

    def test_etcd_checks_its_clients(self) -> None:
        """etcd speaks TLS and takes only clients (and peers) with a certificate of the CA."""
        etcd = flags(self.lines["etcd"])
        self.assertEqual(etcd["--data-dir"], "/d/etcd")
        self.assertIn("--client-cert-auth", etcd)
        self.assertIn("--peer-client-cert-auth", etcd)
        self.assertEqual(etcd["--trusted-ca-file"], "/d/ca.crt")
        apiserver = flags(self.lines["kube-apiserver"])
        self.assertEqual(apiserver["--etcd-servers"], "https://127.0.0.1:20001")
        self.assertEqual(apiserver["--etcd-certfile"], "/d/apiserver-etcd-client.crt")

    def test_apiserver(self) -> None:
        """The API server: its port, tokens, Node and RBAC, NodeRestriction, no reconciler, no plain port."""
        apiserver = flags(self.lines["kube-apiserver"])
        self.assertEqual(apiserver["--secure-port"], "20000")
        self.assertEqual(apiserver["--insecure-port"], "0")
        self.assertEqual(apiserver["--token-auth-file"], "/d/tokens.csv")
        self.assertEqual(apiserver["--authorization-mode"], "Node,RBAC")
        self.assertEqual(apiserver["--enable-admission-plugins"], "NodeRestriction")
        self.assertEqual(apiserver["--endpoint-reconciler-type"], "none")
        self.assertEqual(apiserver["--kubelet-preferred-address-types"], "InternalIP")
        self.assertEqual(apiserver["--kubelet-client-certificate"], "/d/kubelet-client.crt")
        self.assertEqual(apiserver["--default-not-ready-toleration-seconds"], "2")
        self.assertEqual(apiserver["--default-unreachable-toleration-seconds"], "2")
        self.assertEqual(apiserver["--service-account-signing-key-file"], "/d/sa.key")

    def test_scheduler_and_controller_manager(self) -> None:
        """Both: their kubeconfig, their port, no leader election, no plain port; the controller-manager's fast node monitor."""
        scheduler = flags(self.lines["kube-scheduler"])
        manager = flags(self.lines["kube-controller-manager"])
        self.assertEqual(scheduler["--kubeconfig"], "/d/scheduler.kubeconfig")
        self.assertEqual(manager["--kubeconfig"], "/d/controller-manager.kubeconfig")
        self.assertEqual((scheduler["--secure-port"], manager["--secure-port"]), ("20003", "20004"))
        for each in (scheduler, manager):
            self.assertEqual((each["--leader-elect"], each["--port"]), ("false", "0"))
        self.assertIn("--use-service-account-credentials", manager)
        self.assertEqual((manager["--node-monitor-period"], manager["--node-monitor-grace-period"]), ("2s", "10s"))
        self.assertEqual(manager["--root-ca-file"], "/d/ca.crt")
        self.assertEqual((scheduler["--tls-cert-file"], manager["--tls-cert-file"]),
                         ("/d/scheduler.crt", "/d/controller-manager.crt"))
        self.assertEqual(manager["--flex-volume-plugin-dir"], "/d/flexvolume")

    def test_api_url(self) -> None:
        """The API URL is https on loopback at the API server's port."""
        self.assertEqual(LAYOUT.api_url, "https://127.0.0.1:20000")
