"""Tests for :mod:`vmservice.cluster.kubelet.site`: the kubelet API's paths, checks and Status answers."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from twisted.internet.defer import execute
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from tests.cluster.kubelet.fakes import FakeExecGuest, FakeGuests, FakeResolver
from vmservice.cluster.kubelet.site import kubelet_site
from vmservice.cluster.pod_resolver import PodResolver
from vmservice.errors import NotFound

UPGRADE = {b"upgrade": b"websocket", b"connection": b"Upgrade", b"sec-websocket-key": b"dGhlIHNhbXBsZSBub25jZQ==",
           b"sec-websocket-version": b"13", b"sec-websocket-protocol": b"v5.channel.k8s.io"}


class Gate:
    """A KubeletTls stand-in: lets a request in or not."""

    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed

    def authenticated(self, transport: Any) -> bool:
        return self.allowed


class SiteTests(SynchronousTestCase):
    def setUp(self) -> None:
        directory = self.mktemp()
        os.makedirs(directory)
        self.console = os.path.join(directory, "console.log")
        with open(self.console, "wb") as stream:
            stream.write(b"one\ntwo\n")

    def console_path(self, hostname: str) -> str:
        if hostname != "demo-1":
            raise NotFound("no such node")
        return self.console

    def get(self, uri: bytes, method: bytes = b"GET", headers: Optional[dict[bytes, bytes]] = None,
            tls: Any = None) -> tuple[int, bytes]:
        resolver = FakeResolver()
        site = kubelet_site(Clock(), resolver, FakeGuests(FakeExecGuest()), self.console_path, 1 << 20,
                            execute, tls, resolver.pods)
        request = DummyRequest([b""])
        request.method, request.uri, request.path = method, uri, uri.partition(b"?")[0]
        for name, value in (headers or {}).items():
            request.requestHeaders.setRawHeaders(name, [value])
        result = site.resource.render(request)
        if result is not NOT_DONE_YET:
            request.write(result)
            request.finish()
        self.assertEqual(request.finished, 1)
        return request.responseCode or 200, b"".join(request.written)

    def status(self, uri: bytes, **kwargs: Any) -> tuple[int, str, str]:
        code, body = self.get(uri, **kwargs)
        found = json.loads(body)
        self.assertEqual((found["kind"], found["code"]), ("Status", code))
        return code, found["reason"], found["message"]

    def test_healthz(self) -> None:
        self.assertEqual(self.get(b"/healthz"), (200, b"ok"))

    def test_pods(self) -> None:
        """GET /pods lists what the resolver knows as a PodList."""
        code, body = self.get(b"/pods")
        self.assertEqual(json.loads(body)["items"][0]["metadata"], {"namespace": "default", "name": "web",
                                                                    "uid": "uid-1"})

    def test_no_pod_list(self) -> None:
        """Without a list of pods GET /pods is an empty PodList."""
        site = kubelet_site(Clock(), FakeResolver(), FakeGuests(FakeExecGuest()), self.console_path, 1 << 20,
                            execute, None)
        request = DummyRequest([b""])
        request.method, request.uri, request.path = b"GET", b"/pods", b"/pods"
        self.assertEqual(json.loads(site.resource.render(request))["items"], [])

    def test_pod_controllers_resolver(self) -> None:
        """The pod controller's PodResolver is what the site takes: its None is a 404."""
        class Controller:
            def hostname(self, namespace: str, pod: str) -> Optional[str]:
                return "demo-1" if (namespace, pod) == ("default", "web") else None

        site = kubelet_site(Clock(), PodResolver(Controller()), FakeGuests(FakeExecGuest()),  # type: ignore[arg-type]
                            self.console_path, 1 << 20, execute, None)
        for uri, code in ((b"/containerLogs/default/web/vm", 200), (b"/containerLogs/default/db/vm", 404)):
            request = DummyRequest([b""])
            request.method, request.uri, request.path = b"GET", uri, uri
            site.resource.render(request)
            self.assertEqual(request.responseCode or 200, code)

    def test_logs(self) -> None:
        code, body = self.get(b"/containerLogs/default/web/vm?tailLines=1")
        self.assertEqual((code, body), (200, b"two\n"))

    def test_logs_unknown_pod(self) -> None:
        self.assertEqual(self.status(b"/containerLogs/default/other/vm")[:2], (404, "NotFound"))

    def test_logs_bad_query(self) -> None:
        self.assertEqual(self.status(b"/containerLogs/default/web/vm?tailLines=-3")[:2], (400, "BadRequest"))

    def test_hostile_path(self) -> None:
        """A path that is no pod name is a 400, before any lookup."""
        self.assertEqual(self.status(b"/containerLogs/default/..%2f..%2fetc/vm")[0], 400)
        self.assertEqual(self.status(b"/containerLogs/default/web")[0], 400)

    def test_unknown_path(self) -> None:
        self.assertEqual(self.status(b"/stats/summary")[:2], (404, "NotFound"))

    def test_unauthenticated(self) -> None:
        """A client the TLS check does not let in gets a 401 Status, whatever it asks."""
        self.assertEqual(self.status(b"/healthz", tls=Gate(False))[:2], (401, "Unauthorized"))
        self.assertEqual(self.get(b"/healthz", tls=Gate(True)), (200, b"ok"))

    def test_attach_and_port_forward(self) -> None:
        """No attach to a VM (400); port forwarding is the daemon's own API's (501)."""
        self.assertEqual(self.status(b"/attach/default/web/vm")[0], 400)
        code, reason, message = self.status(b"/portForward/default/web")
        self.assertEqual(code, 501)
        self.assertIn("forward", message)

    def test_spdy(self) -> None:
        """An exec asking for SPDY/3.1 is told it is not supported."""
        code, reason, message = self.status(b"/exec/default/web/vm?command=true&output=1", method=b"POST",
                                            headers={b"upgrade": b"SPDY/3.1", b"connection": b"Upgrade"})
        self.assertEqual(code, 400)
        self.assertIn("SPDY/3.1 is not supported", message)

    def test_exec_no_upgrade(self) -> None:
        self.assertEqual(self.status(b"/exec/default/web/vm?command=true&output=1")[0], 400)

    def test_exec_wrong_protocol(self) -> None:
        """A WebSocket offering no channel protocol served is refused."""
        headers = {**UPGRADE, b"sec-websocket-protocol": b"channel.k8s.io"}
        code, reason, message = self.status(b"/exec/default/web/vm?command=true&output=1", headers=headers)
        self.assertIn("v5.channel.k8s.io", message)

    def test_exec_unknown_pod(self) -> None:
        self.assertEqual(self.status(b"/exec/default/other/vm?command=true&output=1", headers=UPGRADE)[0], 404)

    def test_exec_bad_query(self) -> None:
        self.assertEqual(self.status(b"/exec/default/web/vm?stdout=1", headers=UPGRADE)[0], 400)
