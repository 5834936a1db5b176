# -*- test-case-name: tests.client.test_kubeapi -*-
"""
Tests for :mod:`vmservice.client.kubeapi` against :class:`~tests.client.kubefakes.FakeKube`:
the request, the answers it takes and those it refuses, its bounds, and the
TLS options made of a kubeconfig's CA and client certificate.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.client.kubefakes import FakeKube, pem_files
from vmservice.client.kubeapi import ClusterTls, KubeApi, KubeApiError
from vmservice.client.kubeconfig import ClusterAccess, KubeconfigError


def access(token: str | None = "tok", ca_pem: bytes | None = None, client_pem: bytes | None = None) -> ClusterAccess:
    return ClusterAccess(server="https://127.0.0.1:6443", ca_pem=ca_pem, token=token, client_pem=client_pem,
                         namespace="default")


class GetTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.kube = FakeKube()
        self.api = KubeApi(self.clock, access(), self.kube, timeout=5, limit=1000)

    def error(self, path: str = "/api/v1/nodes/a") -> KubeApiError:
        return self.failureResultOf(Deferred.fromCoroutine(self.api.get(path)), KubeApiError).value

    def test_object(self) -> None:
        """A JSON object is the answer; the token and Accept are sent, no redirect followed."""
        self.kube.objects["/api/v1/nodes/a"] = {"kind": "Node"}
        self.assertEqual(self.successResultOf(Deferred.fromCoroutine(self.api.get("/api/v1/nodes/a"))),
                         {"kind": "Node"})
        url, headers = self.kube.requests[0]
        self.assertEqual(url, "https://127.0.0.1:6443/api/v1/nodes/a")
        self.assertEqual((headers[b"Authorization"], headers[b"Accept"]), ([b"Bearer tok"], [b"application/json"]))

    def test_no_token(self) -> None:
        """Without a token no Authorization header is sent (a client certificate speaks instead)."""
        self.api = KubeApi(self.clock, access(token=None), self.kube)
        self.error()
        self.assertNotIn(b"Authorization", self.kube.requests[0][1])

    def test_status_message(self) -> None:
        """A refusal carries its status and the Status's message, or the answer's text, on one line."""
        error = self.error()
        self.assertEqual(error.status, 404)
        self.assertIn("404 a not found", str(error))
        self.kube.answers["/api/v1/nodes/a"] = (403, b"forbidden:\x1b[31m\nnode   x")
        text = str(self.error())
        self.assertIn("403 forbidden:[31m node x", text)
        self.assertNotIn("\x1b", text)

    def test_malformed(self) -> None:
        """Not JSON, not an object, or larger than the bound: status 0 and why."""
        for body, words in [(b"{", "not a JSON object"), (b"[1]", "not a JSON object"), (b"x" * 1001, "larger than")]:
            self.kube.answers["/api/v1/nodes/a"] = (200, body)
            error = self.error()
            self.assertEqual(error.status, 0)
            self.assertIn(words, str(error))

    def test_unreachable(self) -> None:
        """A connection that fails names the server and the reason."""
        self.kube.error = ConnectionRefusedError("refused")
        self.assertEqual(str(self.error()), "cannot reach the Kubernetes API at https://127.0.0.1:6443: refused")

    def test_timeout(self) -> None:
        """A server that does not answer in time is an error, not a wait forever."""
        self.kube.hang = True
        answer = Deferred.fromCoroutine(self.api.get("/api/v1/nodes/a"))
        self.assertNoResult(answer)
        self.clock.advance(5)
        self.assertIn("did not answer GET /api/v1/nodes/a within 5 s", str(self.failureResultOf(answer).value))


class TlsTests(SynchronousTestCase):
    def test_ca_and_client_certificate(self) -> None:
        """The CA and the client certificate with its key make client TLS options."""
        ca, certificate, key = pem_files()
        policy = ClusterTls(access(ca_pem=ca, client_pem=certificate + b"\n" + key))
        self.assertIsNotNone(policy.creatorForNetloc(b"127.0.0.1", 6443))
        self.assertIsNotNone(ClusterTls(access()).creatorForNetloc(b"localhost", 6443))

    def test_unreadable(self) -> None:
        """A CA without a certificate, a bad one, or a key not of the certificate: KubeconfigError."""
        ca, certificate, key = pem_files()
        other_key = pem_files()[2]
        for bad in [access(ca_pem=b"nothing"), access(ca_pem=b"-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----"),
                    access(client_pem=certificate + b"\n" + other_key), access(client_pem=certificate)]:
            self.assertRaises(KubeconfigError, ClusterTls, bad)
