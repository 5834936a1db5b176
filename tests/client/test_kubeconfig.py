# -*- test-case-name: tests.client.test_kubeconfig -*-
"""
Tests for :mod:`vmservice.client.kubeconfig`: which file, what of it is
taken, what is refused, and that no input raises anything but
:class:`KubeconfigError`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.client.kubeconfig import (
    MAX_FILE, ClusterAccess, KubeconfigError, kubeconfig_path, load_kubeconfig, parse_kubeconfig,
)


def config(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None,
           context: dict[str, Any] | None = None) -> str:
    """A kubeconfig of one context ``c`` (cluster ``k``, user ``u``) with these entries (a server and a token by default)."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://10.0.0.1:6443"} if cluster is None else cluster}],
        "users": [{"name": "u", "user": {"token": "secret-token"} if user is None else user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", **(context or {})}}],
    })


def files(contents: dict[str, bytes]) -> Any:
    """A reader of the files ``contents`` (by absolute path); others do not exist."""
    def read(path: str) -> bytes:
        if path not in contents:
            raise FileNotFoundError(2, "No such file or directory")
        return contents[path]
    return read


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class PathTests(SynchronousTestCase):
    def test_explicit_environment_home(self) -> None:
        """--kubeconfig, else the first entry of $KUBECONFIG, else $HOME/.kube/config."""
        self.assertEqual(kubeconfig_path("/a/b", {"KUBECONFIG": "/c"}), "/a/b")
        self.assertEqual(kubeconfig_path(None, {"KUBECONFIG": "::/c:/d"}), "/c")
        self.assertEqual(kubeconfig_path(None, {"KUBECONFIG": "", "HOME": "/home/x"}), "/home/x/.kube/config")


class ParseTests(SynchronousTestCase):
    def test_token_and_ca_file(self) -> None:
        """The server, a CA file relative to the kubeconfig's directory, a token, the default namespace."""
        access = parse_kubeconfig(config({"server": "https://h:6443/", "certificate-authority": "ca.crt"}),
                                  "/etc/k", files({"/etc/k/ca.crt": b"CA"}))
        self.assertEqual(access, ClusterAccess(server="https://h:6443", ca_pem=b"CA", token="secret-token",
                                               client_pem=None, namespace="default"))
        self.assertNotIn("secret-token", repr(access))

    def test_inline_data_token_file_namespace(self) -> None:
        """certificate-authority-data, tokenFile, client certificate and key data, the context's namespace."""
        text = config({"server": "https://h", "certificate-authority-data": b64(b"CA")},
                      {"tokenFile": "/t", "client-certificate-data": b64(b"CERT"), "client-key-data": b64(b"KEY")},
                      {"namespace": "team"})
        access = parse_kubeconfig(text, "/", files({"/t": b"tok\n"}))
        self.assertEqual((access.ca_pem, access.token, access.client_pem, access.namespace),
                         (b"CA", "tok", b"CERT\nKEY", "team"))

    def test_client_certificate_files(self) -> None:
        """A client certificate and key in files; no CA: the system's."""
        access = parse_kubeconfig(config(user={"client-certificate": "c.pem", "client-key": "k.pem"}), "/d",
                                  files({"/d/c.pem": b"C", "/d/k.pem": b"K"}))
        self.assertEqual((access.ca_pem, access.token, access.client_pem), (None, None, b"C\nK"))

    def test_refused(self) -> None:
        """What vmctl does not do is refused by name; so are half or doubled credentials and an http server."""
        for text, words in [
            (config(user={"exec": {"command": "x"}}), "exec"),
            (config(user={"auth-provider": {"name": "oidc"}}), "auth-provider"),
            (config(user={"username": "a", "password": "b"}), "username"),
            (config({"server": "https://h", "insecure-skip-tls-verify": True}), "insecure-skip-tls-verify"),
            (config({"server": "http://h:8080"}), "https"),
            (config({}), "no server"),
            (config(user={"client-certificate-data": b64(b"C")}), "needs its key"),
            (config(user={"token": "a", "client-key": "k", "client-key-data": b64(b"K")}), "both"),
            (config({"server": "https://h", "certificate-authority-data": "!!"}), "not base64"),
            (config(user={"token": "two words"}), "white space"),
            (config({"server": "https://h", "certificate-authority": "none"}), "cannot read the certificate-authority"),
            ("[1, 2]", "expected a mapping"),
            ("{", "not YAML"),
            (json.dumps({"current-context": "c"}), "no contexts list"),
            (json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": 3}]}), "not a mapping"),
            (json.dumps({"current-context": "x", "contexts": []}), "no context named 'x'"),
        ]:
            with self.assertRaises(KubeconfigError) as raised:
                parse_kubeconfig(text, "/", files({}))
            self.assertIn(words, str(raised.exception))

    @settings(max_examples=200)
    @given(st.text(max_size=300))
    def test_any_text(self, text: str) -> None:
        """Any text is a ClusterAccess or a KubeconfigError, nothing else."""
        try:
            parse_kubeconfig(text, "/", files({}))
        except KubeconfigError:
            pass

    @settings(max_examples=200)
    @given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8) |
                        st.sampled_from(["c", "k", "u", "https://h", "x.pem", "Q0E="]),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                            st.sampled_from(["name", "cluster", "user", "context", "server", "token", "tokenFile",
                                             "certificate-authority", "certificate-authority-data", "namespace",
                                             "client-certificate", "client-key-data", "clusters", "users",
                                             "contexts", "current-context", "exec"]) | st.text(max_size=4),
                            inner, max_size=5),
                        max_leaves=30),
           st.binary(max_size=20))
    def test_any_structure(self, document: Any, content: bytes) -> None:
        """Any JSON structure, and any file content, is a ClusterAccess or a KubeconfigError."""
        try:
            parse_kubeconfig(json.dumps(document), "/", lambda path: content)
        except KubeconfigError:
            pass


class LoadTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)

    def test_load(self) -> None:
        """A file read: its relative paths from its own directory; its name in every error."""
        path = os.path.join(self.directory, "config")
        with open(path, "w") as stream:
            stream.write(config(user={"tokenFile": "token"}))
        with open(os.path.join(self.directory, "token"), "w") as stream:
            stream.write("from-file\n")
        self.assertEqual(load_kubeconfig(path).token, "from-file")
        os.remove(os.path.join(self.directory, "token"))
        self.assertIn(path, str(self.assertRaises(KubeconfigError, load_kubeconfig, path)))
        self.assertIn("cannot read the kubeconfig", str(self.assertRaises(KubeconfigError, load_kubeconfig,
                                                                           path + ".none")))

    def test_bounded(self) -> None:
        """A file larger than the bound, or not UTF-8, is refused."""
        path = os.path.join(self.directory, "big")
        with open(path, "wb") as stream:
            stream.write(b" " * (MAX_FILE + 1))
        self.assertIn("larger than", str(self.assertRaises(KubeconfigError, load_kubeconfig, path)))
        with open(path, "wb") as stream:
            stream.write(b"\xff")
        self.assertIn("not UTF-8", str(self.assertRaises(KubeconfigError, load_kubeconfig, path)))
