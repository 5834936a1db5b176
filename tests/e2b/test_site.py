"""
Tests for :mod:`vmservice.e2b.site`, :mod:`vmservice.e2b.control` and
:mod:`vmservice.e2b.data_plane`: every route's statuses and bodies over
HTTP (a connection on a ``StringTransport``), auth on and off, the gate's
refusals, bad bodies, and the data plane as far as it is served.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import open_connection, parse_response
from tests.e2b.hosts import CONFIG, make_sandboxes
from vmservice.auth import Tokens
from vmservice.config import ApiConfig, AuthConfig, Config
from vmservice.e2b.inputs import MAX_BODY
from vmservice.e2b.site import e2b_site

KEY = "e2b_0123456789"


class SiteCase(SynchronousTestCase):
    """A site over fake nodes; auth off unless :attr:`tokens` says otherwise."""

    tokens: Tokens | None = None

    def setUp(self) -> None:
        self.sandboxes, self.host, self.clock, _ = make_sandboxes(self)
        config = Config(api=ApiConfig(auth=AuthConfig(enabled=self.tokens is not None)))
        self.site = e2b_site(self.clock, config, CONFIG, self.sandboxes, self.host, self.tokens).wrappedFactory

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                raw: bytes | None = None) -> tuple[int, dict[bytes, bytes], Any]:
        """One request on a new connection: its status, headers and JSON body (``None`` when empty)."""
        channel, transport = open_connection(self, self.site)
        channel.callLater = self.clock.callLater
        content = raw if raw is not None else b"" if body is None else json.dumps(body).encode()
        sent = {"Host": "127.0.0.1:49982", "X-API-KEY": KEY, "Content-Length": str(len(content)), **(headers or {})}
        head = "".join(f"{name}: {value}\r\n" for name, value in sent.items())
        channel.dataReceived(f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode() + content)
        self.clock.advance(0)
        status, answered, data = parse_response(transport.value())
        return status, answered, json.loads(data) if data else None

    def create(self, **fields: Any) -> str:
        status, _, body = self.request("POST", "/v2/sandboxes", {"templateID": "base", **fields})
        self.assertEqual(status, 201, body)
        return str(body["sandboxID"])


class ControlPlaneTests(SiteCase):
    def test_create(self) -> None:
        """Both create paths: 201 and E2B's Sandbox."""
        for path in ("/sandboxes", "/v2/sandboxes"):
            status, headers, body = self.request("POST", path, {"templateID": "base", "metadata": {"k": "v"}})
            self.assertEqual((status, headers[b"content-type"]), (201, b"application/json"))
            self.assertEqual(set(body), {"templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken"})
            self.assertEqual((body["templateID"], body["envdVersion"]), ("base", "0.6.4"))

    def test_create_bad(self) -> None:
        """Malformed bodies and unknown templates: 400 with E2B's body."""
        for raw, message in ((b"{", "the body is not JSON"), (b'{"templateID": 7}', "templateID must be"),
                             (b'{"templateID": "nope"}', "template 'nope' not found")):
            status, _, body = self.request("POST", "/v2/sandboxes", raw=raw)
            self.assertEqual((status, body["code"]), (400, 400))
            self.assertTrue(body["message"].startswith(message), body)

    def test_list(self) -> None:
        """Newest first, filtered by metadata and state, paged with X-Next-Token; the old path too."""
        first, second, third = self.create(metadata={"team": "a"}), self.create(), self.create(metadata={"team": "a"})
        self.request("POST", f"/sandboxes/{third}/pause")
        status, headers, body = self.request("GET", "/v2/sandboxes")
        self.assertEqual((status, [entry["sandboxID"] for entry in body]), (200, [third, second, first]))
        self.assertNotIn(b"x-next-token", headers)
        self.assertEqual(body[0]["state"], "paused")
        self.assertEqual(set(body[0]), {"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount",
                                        "memoryMB", "diskSizeMB", "state", "envdVersion", "metadata"})
        _, _, body = self.request("GET", "/v2/sandboxes?metadata=team%3Da&state=running")
        self.assertEqual([entry["sandboxID"] for entry in body], [first])
        _, headers, body = self.request("GET", "/v2/sandboxes?limit=2")
        self.assertEqual(len(body), 2)
        token = headers[b"x-next-token"].decode()
        _, headers, body = self.request("GET", f"/v2/sandboxes?limit=2&nextToken={token}")
        self.assertEqual(([entry["sandboxID"] for entry in body], headers.get(b"x-next-token")), ([first], None))
        self.assertEqual(len(self.request("GET", "/sandboxes")[2]), 3)
        status, _, body = self.request("GET", "/v2/sandboxes?limit=0")
        self.assertEqual((status, body["code"]), (400, 400))

    def test_info(self) -> None:
        """200 with the detail; 404 for no such sandbox, and for an id no sandbox can have."""
        sandbox_id = self.create(timeout=60)
        status, _, body = self.request("GET", f"/sandboxes/{sandbox_id}")
        self.assertEqual((status, body["state"], body["lifecycle"]), (200, "running",
                                                                     {"autoResume": False, "onTimeout": "kill"}))
        self.assertEqual(body["endAt"], "2026-01-01T00:01:00.000000Z")
        for missing in ("inosuchsandbox000000", "..", "x"):
            status, _, body = self.request("GET", f"/sandboxes/{missing}")
            self.assertEqual((status, body["code"]), (404, 404))

    def test_kill(self) -> None:
        """204, then 404."""
        sandbox_id = self.create()
        self.assertEqual(self.request("DELETE", f"/sandboxes/{sandbox_id}")[:2][0], 204)
        self.assertEqual(self.request("DELETE", f"/sandboxes/{sandbox_id}")[0], 404)

    def test_timeout(self) -> None:
        """204 (and the sandbox gone at its new end); 404; 400 for a bad body."""
        sandbox_id = self.create()
        self.assertEqual(self.request("POST", f"/sandboxes/{sandbox_id}/timeout", {"timeout": 5})[0], 204)
        self.assertEqual(self.request("POST", f"/sandboxes/{sandbox_id}/timeout", {"timeout": "5"})[0], 400)
        self.clock.advance(5)
        self.assertEqual(self.request("GET", f"/sandboxes/{sandbox_id}")[0], 404)
        self.assertEqual(self.request("POST", f"/sandboxes/{sandbox_id}/timeout", {"timeout": 5})[0], 404)

    def test_pause_and_connect(self) -> None:
        """Pause 204 then 409; connect 201 (resumed) then 200 (running), on both paths; 404s."""
        sandbox_id = self.create()
        self.assertEqual(self.request("POST", f"/sandboxes/{sandbox_id}/pause")[0], 204)
        status, _, body = self.request("POST", f"/sandboxes/{sandbox_id}/pause", {"memory": True})
        self.assertEqual((status, body["code"]), (409, 409))
        status, _, body = self.request("POST", f"/v2/sandboxes/{sandbox_id}/connect", {"timeout": 30})
        self.assertEqual((status, body["sandboxID"]), (201, sandbox_id))
        status, _, body = self.request("POST", f"/sandboxes/{sandbox_id}/connect", {"timeout": 30})
        self.assertEqual(status, 200)
        for path in ("/sandboxes/inosuchsandbox000000/connect", "/sandboxes/inosuchsandbox000000/pause"):
            self.assertEqual(self.request("POST", path, {"timeout": 1})[0], 404)

    def test_metrics(self) -> None:
        """200 with one sample; [] while paused."""
        sandbox_id = self.create()
        status, _, body = self.request("GET", f"/sandboxes/{sandbox_id}/metrics")
        self.assertEqual((status, len(body), body[0]["cpuCount"]), (200, 1, 2))
        self.request("POST", f"/sandboxes/{sandbox_id}/pause")
        self.assertEqual(self.request("GET", f"/sandboxes/{sandbox_id}/metrics")[1:][1], [])

    def test_unknown(self) -> None:
        """No such path: 404; a method a path does not take: 405; both with E2B's body."""
        self.assertEqual(self.request("GET", "/templates")[2], {"code": 404, "message": "no such path: '/templates'"})
        status, _, body = self.request("PUT", "/v2/sandboxes")
        self.assertEqual((status, body["code"]), (405, 405))

    def test_gate(self) -> None:
        """Another Host (a rebinding page): 421; a foreign Origin: 403; a body over the bound: 400, not read."""
        self.assertEqual(self.request("GET", "/v2/sandboxes", headers={"Host": "evil.example"})[0], 421)
        status, _, _ = self.request("POST", "/v2/sandboxes", {"templateID": "base"},
                                    headers={"Origin": "http://evil.example"})
        self.assertEqual(status, 403)
        status, headers, body = self.request("POST", "/v2/sandboxes", headers={"Content-Length": str(MAX_BODY + 1)})
        self.assertEqual((status, body["code"], headers[b"connection"]), (400, 400, b"close"))
        self.assertEqual(self.host.calls, [])

    def test_any_key(self) -> None:
        """Auth off: any key (or none) is taken."""
        self.assertEqual(self.request("GET", "/v2/sandboxes", headers={"X-API-KEY": "whatever"})[0], 200)


class AuthTests(SiteCase):
    """Auth on: X-API-KEY must be one of the daemon's tokens."""

    tokens = Tokens.fixed(KEY)

    def test_keys(self) -> None:
        status, _, body = self.request("GET", "/v2/sandboxes", headers={"X-API-KEY": "wrong"})
        self.assertEqual((status, body), (401, {"code": 401, "message": "Invalid API key"}))
        channel, transport = open_connection(self, self.site)
        channel.dataReceived(b"POST /v2/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
        self.clock.advance(0)
        self.assertEqual(parse_response(transport.value())[0], 401)
        self.assertEqual(self.host.calls, [])
        self.create()


class DataPlaneTests(SiteCase):
    def test_health(self) -> None:
        """204 while running; 502 paused or gone (what the SDKs read as not running)."""
        sandbox_id = self.create()
        header = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"}
        self.assertEqual(self.request("GET", "/health", headers=header)[0], 204)
        self.request("POST", f"/sandboxes/{sandbox_id}/pause")
        status, headers, _ = self.request("GET", "/health", headers=header)
        self.assertEqual((status, headers[b"should-retry"]), (502, b"false"))
        self.request("DELETE", f"/sandboxes/{sandbox_id}")
        status, _, body = self.request("GET", "/health", headers=header)
        self.assertEqual((status, body["code"]), (502, 502))

    def test_not_served(self) -> None:
        """A Connect call no service has: 501 with Connect's ``unimplemented``; any other path: 404 with E2B's body."""
        header = {"E2b-Sandbox-Id": self.create(), "Content-Type": "application/json"}
        status, _, body = self.request("POST", "/nothing.Nothing/List", {}, headers=header)
        self.assertEqual((status, body["code"]), (501, "unimplemented"))
        status, _, body = self.request("GET", "/nothing?path=/x", headers=header)
        self.assertEqual((status, body["code"]), (404, 404))
