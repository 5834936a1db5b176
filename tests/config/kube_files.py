"""
Files the tests of the ``kubernetes:`` section read: a CA, a token file and
kubeconfigs, written in a test's own temporary directory.
"""

from __future__ import annotations

import base64
import os

from twisted.trial.unittest import SynchronousTestCase

CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


class KubeFiles:
    """A directory of a test with ``ca.pem`` and ``node.token`` in it."""

    def __init__(self, case: SynchronousTestCase) -> None:
        self.directory = os.path.abspath(case.mktemp())
        os.makedirs(self.directory, mode=0o700)
        self.ca = self.write("ca.pem", CA_PEM)
        self.token = self.write("node.token", b"secret-token\n")

    def write(self, name: str, data: bytes) -> str:
        """``data`` as the file ``name`` of the directory; its path."""
        path = os.path.join(self.directory, name)
        with open(path, "wb") as stream:
            stream.write(data)
        return path

    def kubeconfig(self, user: str = "token: kube-token", cluster: str | None = None) -> str:
        """A kubeconfig whose current context's user says ``user``; its path."""
        cluster = cluster or f"certificate-authority-data: {base64.b64encode(CA_PEM).decode()}"
        text = f"""apiVersion: v1
kind: Config
current-context: node
contexts:
- name: node
  context: {{cluster: dev, user: vms-a}}
clusters:
- name: dev
  cluster:
    server: https://127.0.0.1:6443
    {cluster}
users:
- name: vms-a
  user:
    {user}
"""
        return self.write("node.kubeconfig", text.encode())

    def section(self, body: str = "") -> str:
        """A configuration whose ``kubernetes:`` section uses the direct files, with ``body`` (lines at 4 spaces)."""
        return (f"config:\n  kubernetes:\n    api_url: https://127.0.0.1:6443\n    ca_file: {self.ca}\n"
                f"    token_file: {self.token}\n    node_name: vms-a\n{body}")


__all__ = ["CA_PEM", "KubeFiles"]
