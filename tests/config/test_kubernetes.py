"""
Tests for the ``kubernetes:`` section: :mod:`vmservice.config.kubernetes`,
:mod:`vmservice.config.resolve_kubernetes` and :mod:`vmservice.config.kubeconfig`.
"""

from __future__ import annotations

import os
import socket

from tests.config.kube_files import CA_PEM, KubeFiles
from tests.config.parsing import EXAMPLE, ConfigErrorCase, parse_text
from vmservice.config import CapacityConfig, TaintConfig, TokenSource
from vmservice.config.kubeconfig import KubeconfigError, read_kubeconfig, read_token

K = "config.kubernetes"


class SectionTests(ConfigErrorCase):
    """The section resolved."""

    def setUp(self) -> None:
        self.files = KubeFiles(self)

    def test_absent_or_disabled(self) -> None:
        """No section, or enabled: false: the daemon is no cluster node (nothing else is checked)."""
        self.assertIsNone(parse_text("config: {}\n").kubernetes)
        self.assertIsNone(parse_text("config:\n  kubernetes:\n    enabled: false\n").kubernetes)

    def test_direct_files(self) -> None:
        """api_url, ca_file, token_file: the defaults filled in."""
        kube = parse_text(self.files.section()).kubernetes
        assert kube is not None
        self.assertEqual((kube.server, kube.ca_pem, kube.token), ("https://127.0.0.1:6443", CA_PEM,
                                                                 TokenSource(path=self.files.token)))
        self.assertEqual((kube.node_name, kube.internal_ip, kube.kubelet_port), ("vms-a", "127.0.0.1", 10250))
        self.assertEqual(dict(kube.labels), {"type": "vmservice", "kubernetes.io/os": "linux",
                                             "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": "vms-a",
                                             "node.kubernetes.io/instance-type": "vmservice"})
        self.assertEqual(kube.taints, (TaintConfig(key="vmservice.io/vm", value="true", effect="NoSchedule"),))
        self.assertEqual((kube.capacity, kube.lease_duration_seconds, kube.renew_interval_seconds,
                          kube.status_interval_seconds), (CapacityConfig(), 40, 10.0, 10.0))
        self.assertEqual((kube.default_group, kube.images, kube.pod_boot_timeout_seconds, kube.vmservice_api),
                         (None, (), 300.0, "http://127.0.0.1:8080"))

    def test_every_key(self) -> None:
        """Every key given."""
        kube = parse_text(self.files.section(
            "    internal_ip: 10.1.2.3\n    kubelet_port: 10255\n    labels: {zone: a, type: vm}\n"
            "    taints: [{key: x.io/y, effect: NoExecute}]\n    capacity: {cpu: 2, memory: 4G, pods: 9}\n"
            "    lease_duration_seconds: 20\n    renew_interval_seconds: 5\n    status_interval_seconds: 7.5\n"
        )).kubernetes
        assert kube is not None
        self.assertEqual((kube.internal_ip, kube.kubelet_port), ("10.1.2.3", 10255))
        self.assertEqual((dict(kube.labels)["zone"], dict(kube.labels)["type"]), ("a", "vm"))
        self.assertEqual(kube.taints, (TaintConfig(key="x.io/y", effect="NoExecute"),))
        self.assertEqual(kube.capacity, CapacityConfig(cpu=2, memory=4 * 2**30, pods=9))
        self.assertEqual((kube.lease_duration_seconds, kube.renew_interval_seconds, kube.status_interval_seconds),
                         (20, 5.0, 7.5))
        self.assertEqual(parse_text(self.files.section("    taints: []\n")).kubernetes.taints, ())  # type: ignore[union-attr]

    def test_node_name_default(self) -> None:
        """Without node_name: the host's name, when it is a DNS-1123 subdomain."""
        text = self.files.section().replace("    node_name: vms-a\n", "")
        host = socket.gethostname().lower()
        try:
            kube = parse_text(text).kubernetes
        except Exception as error:
            self.assertIn("set node_name", str(error))
        else:
            assert kube is not None
            self.assertEqual(kube.node_name, host)

    def test_kubeconfig_token(self) -> None:
        """A kubeconfig with an inline token and its CA as data: the token read from the kubeconfig."""
        path = self.files.kubeconfig()
        kube = parse_text(f"config:\n  kubernetes:\n    kubeconfig: {path}\n    node_name: vms-a\n").kubernetes
        assert kube is not None
        self.assertEqual((kube.server, kube.ca_pem, kube.token), ("https://127.0.0.1:6443", CA_PEM,
                                                                 TokenSource(path=path, kubeconfig=True)))
        self.assertEqual(read_token(kube.token), "kube-token")

    def test_kubeconfig_token_file(self) -> None:
        """A kubeconfig naming its CA and token files relative to itself."""
        path = self.files.kubeconfig("tokenFile: node.token", "certificate-authority: ca.pem")
        kube = parse_text(f"config:\n  kubernetes:\n    kubeconfig: {path}\n    node_name: vms-a\n").kubernetes
        assert kube is not None
        self.assertEqual((kube.ca_pem, kube.token), (CA_PEM, TokenSource(path=self.files.token)))
        self.assertEqual(read_token(kube.token), "secret-token")

    def test_bad_values(self) -> None:
        """Each bad value named at its key."""
        for body, expected in (
            ("    node_name: Vms_A\n", f"{K}.node_name: bad node name 'Vms_A'"),
            ("    kubelet_port: 0\n", f"{K}.kubelet_port: kubelet_port 0 out of range (1-65535)"),
            ("    labels: {'bad key!': x}\n", f"{K}.labels.bad key!: bad key 'bad key!'"),
            ("    labels: {a: 'bad value!'}\n", f"{K}.labels.a: bad value 'bad value!'"),
            ("    labels: {kubernetes.io/role: vm}\n", f"{K}.labels.kubernetes.io/role: key 'kubernetes.io/role': "
                                                      "NodeRestriction refuses"),
            ("    labels: {node-restriction.kubernetes.io/x: y}\n", f"{K}.labels.node-restriction.kubernetes.io/x: key"),
            ("    labels: {a: 1}\n", f"{K}.labels.a: expected a string, got integer 1"),
            ("    taints: [{key: x, effect: Sometimes}]\n", f"{K}.taints[0].effect: unknown taint effect 'Sometimes'"),
            ("    taints: [{key: -x, effect: NoSchedule}]\n", f"{K}.taints[0].key: bad key '-x'"),
            ("    taints: [{key: x, value: '!'}]\n", f"{K}.taints[0].value: bad value '!'"),
            ("    capacity: {cpu: 0}\n", f"{K}.capacity.cpu: cpu 0 must be at least 1"),
            ("    capacity: {memory: 1K}\n", f"{K}.capacity.memory: memory 1024 must be at least 1048576"),
            ("    capacity: {pods: 0}\n", f"{K}.capacity.pods: pods 0 must be at least 1"),
            ("    lease_duration_seconds: 0\n", f"{K}.lease_duration_seconds: lease_duration_seconds 0 must be"),
            ("    renew_interval_seconds: 40\n", f"{K}.renew_interval_seconds: renew_interval_seconds 40 must be"),
            ("    status_interval_seconds: 0\n", f"{K}.status_interval_seconds: status_interval_seconds 0 must be"),
            ("    internal_ip: nowhere\n", f"{K}.internal_ip: bad address 'nowhere'"),
            ("    internal_ip: 0.0.0.0\n", f"{K}.internal_ip: 0.0.0.0 is no address"),
            ("    surprise: 1\n", f"{K}.surprise: unknown key"),
            ("    default_group: nope\n", f"{K}.default_group: no host group 'nope'"),
            ("    images: {ubuntu: nope}\n", f"{K}.images.ubuntu: no host group 'nope'"),
            ("    pod_boot_timeout_seconds: 0\n", f"{K}.pod_boot_timeout_seconds: pod_boot_timeout_seconds 0 must be"),
        ):
            text = self.files.section(body)
            if "node_name" in body:
                text = text.replace("    node_name: vms-a\n", "", 1)
            error = self.assertRaises(Exception, parse_text, text)
            self.assertTrue(str(error).startswith(expected), f"{error} does not start with {expected}")

    def test_kubelet_files(self) -> None:
        """The kubelet port's certificate, key and client CA: none by default, read when given, the pair together."""
        kube = parse_text(self.files.section()).kubernetes
        assert kube is not None
        self.assertEqual((kube.kubelet_cert_file, kube.kubelet_key_file, kube.kubelet_client_ca_file), (None, None, None))
        ca = self.files.ca
        kube = parse_text(self.files.section(
            f"    kubelet_cert_file: {ca}\n    kubelet_key_file: {ca}\n    kubelet_client_ca_file: {ca}\n")).kubernetes
        assert kube is not None
        self.assertEqual((kube.kubelet_cert_file, kube.kubelet_key_file, kube.kubelet_client_ca_file), (ca, ca, ca))
        for body, expected in (
            (f"    kubelet_cert_file: {ca}\n", f"{K}.kubelet_cert_file: give kubelet_cert_file and kubelet_key_file"),
            (f"    kubelet_key_file: {ca}\n", f"{K}.kubelet_cert_file: give kubelet_cert_file and kubelet_key_file"),
            ("    kubelet_client_ca_file: /nonexistent/ca.crt\n",
             f"{K}.kubelet_client_ca_file: cannot read /nonexistent/ca.crt"),
        ):
            error = self.assertRaises(Exception, parse_text, self.files.section(body))
            self.assertTrue(str(error).startswith(expected), f"{error} does not start with {expected}")

    def test_internal_ip_required(self) -> None:
        """Without internal_ip, the API's address must be one IP address."""
        for api in ("bind_address: ./api.sock", "{bind_address: 0.0.0.0, allow_unauthenticated_remote: true}"):
            text = self.files.section().replace("config:\n", f"config:\n  api: {api}\n" if "{" in api
                                                else f"config:\n  api:\n    {api}\n")
            error = self.assertRaises(Exception, parse_text, text)
            self.assertTrue(str(error).startswith(f"{K}.internal_ip: required when"), str(error))

    def test_credentials_problems(self) -> None:
        """Both ways at once, a missing key, a bad URL, unreadable files, a CA without a certificate."""
        kubeconfig = self.files.kubeconfig()
        self.assertConfigError(self.files.section(f"    kubeconfig: {kubeconfig}\n"),
                               f"{K}.api_url: give either kubeconfig or api_url, ca_file and token_file")
        text = self.files.section().replace("    api_url: https://127.0.0.1:6443\n", "")
        self.assertConfigError(text, f"{K}.api_url: required key missing (or give kubeconfig instead)")
        for url in ("http://127.0.0.1:6443", "https://", "https://u:p@h:6443", "https://h:6443/x", "https://h:port"):
            error = self.assertRaises(Exception, parse_text, self.files.section().replace(
                "https://127.0.0.1:6443", f"'{url}'"))
            self.assertIn(f"{K}.api_url: bad API server URL", str(error))
        missing = os.path.join(self.files.directory, "missing")
        error = self.assertRaises(Exception, parse_text, self.files.section().replace(self.files.ca, missing))
        self.assertIn(f"{K}.ca_file: cannot read {missing}", str(error))
        error = self.assertRaises(Exception, parse_text, self.files.section().replace(self.files.token, missing))
        self.assertIn(f"{K}.token_file: cannot read the token", str(error))
        self.files.write("ca.pem", b"not a certificate")
        self.assertConfigError(self.files.section(), f"{K}.ca_file: the CA holds no PEM certificate")
        self.files.write("ca.pem", CA_PEM)
        self.files.write("node.token", b"\n")
        error = self.assertRaises(Exception, parse_text, self.files.section())
        self.assertIn("the token is empty", str(error))


class KubeconfigTests(ConfigErrorCase):
    """What is refused of a kubeconfig, by name."""

    def setUp(self) -> None:
        self.files = KubeFiles(self)

    def test_unsupported(self) -> None:
        """Client certificates, exec plugins, skipping TLS verification, two CAs or none, no token."""
        for user, cluster, words in (
            ("client-certificate-data: eA==", None, "the user's client-certificate-data is not supported"),
            ("exec: {command: x}", None, "the user's exec is not supported"),
            ("token: t", "insecure-skip-tls-verify: true", "the cluster's insecure-skip-tls-verify is not supported"),
            ("token: t", "certificate-authority: a\n    certificate-authority-data: eA==", "exactly one of"),
            ("username: u", None, "the user's username is not supported"),
            ("{}", None, "the user needs exactly one of token, tokenFile"),
            ("token: t", "certificate-authority-data: '***'", "not base64"),
        ):
            path = self.files.kubeconfig(user, cluster)
            error = self.assertRaises(Exception, parse_text,
                                      f"config:\n  kubernetes:\n    kubeconfig: {path}\n    node_name: vms-a\n")
            self.assertIn(words, str(error))
            self.assertTrue(str(error).startswith(f"{K}.kubeconfig: "))

    def test_not_a_kubeconfig(self) -> None:
        """Not YAML, not a mapping, no current context, a context naming nothing."""
        for text, words in (("{", "not YAML"), ("[]", "expected a mapping"), ("{}", "no current-context"),
                            ("current-context: x\ncontexts: []", "no context named 'x'"),
                            ("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]", "no clusters")):
            self.assertRaises(KubeconfigError, read_kubeconfig, text, "/")
            try:
                read_kubeconfig(text, "/")
            except KubeconfigError as error:
                self.assertIn(words, str(error))

    def test_token_bounds(self) -> None:
        """A token file too large, or with white space inside, is refused."""
        self.files.write("node.token", b"x" * (64 * 1024 + 1))
        self.assertRaises(KubeconfigError, read_token, TokenSource(path=self.files.token))
        self.files.write("node.token", b"two words")
        self.assertRaises(KubeconfigError, read_token, TokenSource(path=self.files.token))


class ExampleTests(ConfigErrorCase):
    """``conf/cluster-node.yaml``, the example of a cluster node."""

    def test_example(self) -> None:
        """
        conf/cluster-node.yaml and conf/cluster-node-b.yaml parse once their files exist: nodes ``vms-a``
        and ``vms-b`` of token kubeconfigs, on ports, state directories and ranges of their own.
        """
        configs = []
        for name, node in (("cluster-node.yaml", "vms-a"), ("cluster-node-b.yaml", "vms-b")):
            with open(os.path.join(os.path.dirname(EXAMPLE), name), encoding="utf-8") as stream:
                text = stream.read()
            files = KubeFiles(self)
            text = text.replace("/var/lib/vmservice/devcluster/ca.crt", files.ca)
            config = parse_text(text.replace(f"/var/lib/vmservice/devcluster/nodes/{node}.kubeconfig",
                                             files.kubeconfig()))
            assert config.kubernetes is not None
            self.assertEqual((config.kubernetes.node_name, config.kubernetes.token.kubeconfig), (node, True))
            self.assertEqual(config.kubernetes.kubelet_client_ca_file, files.ca)
            self.assertEqual([group.name for group in config.host_groups], ["vm"])
            configs.append(config)
        a, b = configs
        assert a.kubernetes is not None and b.kubernetes is not None
        self.assertNotEqual(a.api.port, b.api.port)
        self.assertNotEqual(a.state_dir, b.state_dir)
        self.assertNotEqual(a.kubernetes.kubelet_port, b.kubernetes.kubelet_port)
        self.assertNotEqual(a.host_groups[0].network.range, b.host_groups[0].network.range)
