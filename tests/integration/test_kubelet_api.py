"""
Integration tests of the kubelet API (:mod:`vmservice.cluster.kubelet`) against a real guest: a daemon
with the kubelet listener beside it (:mod:`tests.integration.kubelet_node`), a client CA of the test's
own, ``containerLogs`` over HTTPS and ``exec`` over a real WebSocket (autobahn's client, protocol
``v5.channel.k8s.io``), and clients without the right certificate refused.
"""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import tempfile
from typing import Any, Optional
from urllib.parse import urlencode

from autobahn.twisted.websocket import WebSocketClientFactory, WebSocketClientProtocol, connectWS
from twisted.internet.defer import Deferred
from twisted.internet.ssl import Certificate, PrivateCertificate, optionsForClientTLS
from twisted.trial.unittest import TestCase

from tests.integration.daemon import SharedGuestTestCase, ensure_image
from tests.integration.kubelet_node import KubeletDaemon, certificates
from tests.integration.loopback import until


class ChannelClient(WebSocketClientProtocol):
    """Collects each channel's bytes; ``done`` fires with them once the socket closes."""

    def __init__(self) -> None:
        super().__init__()
        self.received: dict[int, bytes] = {}
        self.done: Deferred[dict[int, bytes]] = Deferred()
        self.opened: Deferred[None] = Deferred()

    def onOpen(self) -> None:
        self.opened.callback(None)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        self.received[payload[0]] = self.received.get(payload[0], b"") + payload[1:]

    def onClose(self, wasClean: bool, code: Optional[int], reason: Optional[str]) -> None:
        if not self.done.called:
            self.done.callback(self.received)


class KubeletApiTests(SharedGuestTestCase, TestCase):
    """``demo-1`` as pod ``default/web`` (container ``vm``) through the kubelet port."""

    timeout = 300
    files: dict[str, str]

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        directory = tempfile.mkdtemp(prefix="kbl-")
        cls.files = certificates(directory)
        cls.daemon = KubeletDaemon(cls.files["ca.crt"])
        cls.daemon.root_extra = directory  # type: ignore[attr-defined]
        cls.daemon.start()
        cls.created = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)

    @classmethod
    def _stop_shared(cls) -> None:
        super()._stop_shared()
        daemon = getattr(cls, "daemon", None)
        if daemon is not None:
            shutil.rmtree(daemon.root_extra, ignore_errors=True)

    def server_cert(self) -> bytes:
        with open(f"{self.daemon.tls_dir}/kubelet.crt", "rb") as stream:  # type: ignore[attr-defined]
            return stream.read()

    def connection(self, client: Optional[str] = "client") -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cadata=self.server_cert().decode())
        if client is not None:
            context.load_cert_chain(self.files[f"{client}.crt"], self.files[f"{client}.key"])
        return http.client.HTTPSConnection("127.0.0.1", self.daemon.kubelet_port,  # type: ignore[attr-defined]
                                           context=context, timeout=60)

    def https(self, path: str, client: Optional[str] = "client") -> tuple[int, bytes]:
        connection = self.connection(client)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    async def exec(self, command: list[str], stdin: Optional[bytes] = None, tty: bool = False) -> dict[int, bytes]:
        # As the API server writes it for the kubelet.
        query = urlencode([("command", word) for word in command] + [("output", "1")]
                          + ([("tty", "1")] if tty else [("error", "1")])
                          + ([("input", "1")] if stdin is not None else []))
        port = self.daemon.kubelet_port  # type: ignore[attr-defined]
        factory = WebSocketClientFactory(f"wss://127.0.0.1:{port}/exec/default/web/vm?{query}",
                                         protocols=["v5.channel.k8s.io"])
        factory.protocol = ChannelClient
        made: list[ChannelClient] = []

        def build(address: Any) -> ChannelClient:
            protocol = ChannelClient()
            protocol.factory = factory
            made.append(protocol)
            return protocol

        factory.buildProtocol = build  # type: ignore[method-assign]
        with open(self.files["client.crt"], "rb") as c, open(self.files["client.key"], "rb") as k:
            mine = PrivateCertificate.loadPEM(c.read() + k.read())
        options = optionsForClientTLS("127.0.0.1", Certificate.loadPEM(self.server_cert()), mine)
        connector = connectWS(factory, options)
        self.addCleanup(connector.disconnect)
        await until(lambda: bool(made), timeout=30.0)
        await made[0].opened
        if stdin is not None:
            made[0].sendMessage(b"\x00" + stdin, isBinary=True)
            if not tty:
                made[0].sendMessage(b"\xff\x00", isBinary=True)
        return await made[0].done

    async def test_exec_output_and_exit_code(self) -> None:
        """stdout, stderr, and exit code 3 as kubectl reads it from the status channel."""
        received = await self.exec(["sh", "-c", "echo hi; echo oops >&2; exit 3"])
        self.assertEqual((received.get(1), received.get(2)), (b"hi\n", b"oops\n"))
        status = json.loads(received[3])
        self.assertEqual((status["status"], status["reason"]), ("Failure", "NonZeroExitCode"))
        self.assertEqual(status["details"]["causes"], [{"reason": "ExitCode", "message": "3"}])

    async def test_exec_stdin_closed(self) -> None:
        """stdin reaches the command; the v5 close of channel 0 is its EOF; exit 0 is Success."""
        received = await self.exec(["cat"], stdin=b"hello kubelet\n")
        self.assertEqual(received.get(1), b"hello kubelet\n")
        self.assertEqual(json.loads(received[3])["status"], "Success")

    async def test_exec_terminal(self) -> None:
        """kubectl exec -it POD -- sh: a shell on a terminal (a tty answers), its exit code in the Status."""
        received = await self.exec(["sh"], stdin=b"tty && exit 5\n", tty=True)
        self.assertIn(b"/dev/pts/", received.get(1, b""))
        self.assertEqual(json.loads(received[3])["details"]["causes"], [{"reason": "ExitCode", "message": "5"}])

    def test_logs(self) -> None:
        """containerLogs gives the guest's console; tailLines=1 one line of it (the console may grow meanwhile)."""
        code, last = self.https("/containerLogs/default/web/vm?tailLines=1")
        self.assertEqual((code, len(last.splitlines())), (200, 1))
        code, whole = self.https("/containerLogs/default/web/vm")
        self.assertEqual(code, 200)
        self.assertIn(b"vmservice-init", whole)
        self.assertIn(last, whole.splitlines(keepends=True))

    def test_logs_follow(self) -> None:
        """follow=true streams what the guest writes on its console next, with timestamps."""
        connection = self.connection()
        try:
            connection.request("GET", "/containerLogs/default/web/vm?follow=true&tailLines=0&timestamps=true")
            response = connection.getresponse()
            self.assertEqual(response.status, 200)
            self.daemon.run("demo-1", "echo kubelet-follow-marker > /dev/console")
            seen = b""
            while b"kubelet-follow-marker" not in seen:
                piece = response.read1(65536)
                self.assertTrue(piece, "the follow ended early")
                seen += piece
            self.assertRegex(seen.decode(), r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z [^\n]*kubelet-follow-marker")
        finally:
            connection.close()

    def test_unknown_pod(self) -> None:
        code, body = self.https("/containerLogs/default/nosuch/vm")
        self.assertEqual((code, json.loads(body)["reason"]), (404, "NotFound"))

    def test_no_client_certificate(self) -> None:
        """A client with no certificate gets a 401 Status."""
        code, body = self.https("/healthz", client=None)
        self.assertEqual((code, json.loads(body)["reason"]), (401, "Unauthorized"))

    def test_stranger_certificate(self) -> None:
        """A certificate another CA signed fails the handshake."""
        self.assertRaises((ssl.SSLError, ConnectionError), self.https, "/healthz", "stranger")

