"""
Tests for the HTTP API (:mod:`vmservice.api`) through a real Site and Agent
over in-memory connections (treq's StubTreq), with the fleet on fakes.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from treq.testing import StubTreq
from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import RecordingSite, open_connection, parse_response
from tests.api.fleet_api import ApiTestCase, fleet_routes
from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.audit import AuditLog
from vmservice.auth import Token, Tokens
from vmservice.api.inputs.bodies import MAX_JSON_BODY
from vmservice.api.meta import MetaApi
from vmservice.api.nodes import NodesApi
from vmservice.api.vm import VmApi
from vmservice.config import ApiConfig, AuthConfig
from vmservice.metrics import Metrics

TOKEN = "s3cret-token-value"


class MetaTests(ApiTestCase):
    def test_info(self) -> None:
        """GET /info gives the version, the git commit and Go-style platform names."""
        code, body, _ = self.call("GET", "/info")
        self.assertEqual(code, 200)
        self.assertEqual(body["version"], "0.1.0")
        self.assertEqual((body["platform"], body["arch"]), ("linux", "amd64"))
        self.assertTrue(body["git_commit"])

    def test_healthz(self) -> None:
        """GET /healthz is a plain OK; HEAD is 200 without a body."""
        code, body, response = self.call("GET", "/healthz")
        self.assertEqual((code, body), (200, b"OK"))
        code, body, _ = self.call("HEAD", "/healthz")
        self.assertEqual((code, body), (200, b""))

    def test_metrics_count_requests(self) -> None:
        """GET /metrics exposes request counts by route and status, and node gauges."""
        self.call("GET", "/info")
        self.call("GET", "/nope")
        code, body, _ = self.call("GET", "/metrics")
        self.assertEqual(code, 200)
        text = body.decode()
        self.assertIn('vmservice_http_requests_total{method="GET",route="/info",status="200"} 1.0', text)
        self.assertIn('route="unmatched",status="404"', text)
        self.assertIn("vmservice_http_request_duration_seconds_bucket", text)
        self.assertIn("vmservice_boot_duration_seconds", text)

    def test_metrics_by_route_template(self) -> None:
        """Requests on a node's path count under the route's template: no hostname in any label."""
        self.call("GET", "/vm/demo-7")
        self.call("GET", "/vm/other-3/logs")
        self.call("GET", "/vm/demo-7")
        text = self.call("GET", "/metrics")[1].decode()
        self.assertIn('vmservice_http_requests_total{method="GET",route="/vm/{hostname}",status="404"} 2.0', text)
        self.assertIn('route="/vm/{hostname}/logs",status="404"} 1.0', text)
        self.assertNotIn("demo-7", text)
        self.assertNotIn("other-3", text)

    def test_metrics_methods_fixed(self) -> None:
        """
        Unmatched requests with invented methods are counted under OTHER: however many methods clients
        make up, the method label takes only the standard methods and OTHER.
        """
        invented = {"M" + os.urandom(8).hex().upper() for _ in range(50)}
        for method in invented:
            self.call(method, "/nope")
        self.call("BREW", "/nodes")
        self.call("PATCH", "/nope")
        text = self.call("GET", "/metrics")[1].decode()
        methods = set(re.findall(r'vmservice_http_requests_total\{method="([^"]*)"', text))
        self.assertEqual(methods, {"OTHER", "PATCH"})
        self.assertIn('vmservice_http_requests_total{method="OTHER",route="unmatched",status="404"} 50.0', text)
        self.assertIn('vmservice_http_requests_total{method="OTHER",route="unmatched",status="405"} 1.0', text)
        self.assertFalse([method for method in invented if method in text])

    def test_unknown_route(self) -> None:
        """An unknown route is a JSON 404, never HTML; so is a trailing slash."""
        self.assertError(self.call("GET", "/nope"), 404, "route_not_found")
        self.assertError(self.call("GET", "/nodes/"), 404, "route_not_found")

    def test_wrong_method(self) -> None:
        """A known route with the wrong method is a JSON 405 with Allow."""
        result = self.call("PUT", "/nodes")
        self.assertError(result, 405, "method_not_allowed")
        self.assertIn("GET", result[2].headers.getRawHeaders("allow")[0])


class NodeRouteTests(ApiTestCase):
    def create(self, body: bytes = b"{}", query: str = "") -> tuple[int, Any, Any]:
        return self.call("POST", "/hostgroup/demo/nodes" + query, body)

    def test_list_groups(self) -> None:
        """GET /hostgroup lists groups with their limits."""
        code, body, _ = self.call("GET", "/hostgroup")
        self.assertEqual(code, 200)
        self.assertEqual(body[0], {"name": "demo", "count": 0, "ram_bytes": 512 * 1024 * 1024, "cpus": 2, "gpu_count": 0, "arch": "x86_64"})

    def test_create_list_delete(self) -> None:
        """Create answers 201, the node is listed as Running, delete answers 200 with DeleteResponse."""
        code, body, _ = self.create(b'{"tags": ["a"]}')
        self.assertEqual(code, 201)
        self.assertEqual(body["hostname"], "demo-1")
        self.assertEqual(body["ip"], "")
        self.assertRegex(body["created_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        code, nodes, _ = self.call("GET", "/nodes")
        self.assertEqual(code, 200)
        self.assertEqual(
            nodes,
            [{"hostname": "demo-1", "hostgroup": "demo", "ip": "", "ram_bytes": 512 * 1024 * 1024, "cpus": 2,
              "created_at": body["created_at"], "tags": ["a"], "arch": "x86_64", "status": "Running", "persistent": False}],
        )
        self.assertEqual(self.call("GET", "/hostgroup/demo/nodes")[1], nodes)
        self.assertEqual(self.call("GET", "/hostgroup/other/nodes")[1], [])
        code, body, _ = self.call("DELETE", "/hostgroup/demo/nodes/demo-1")
        self.assertEqual((code, body), (200, {"message": "node demo-1 deleted", "disk_removed": "true", "error": ""}))
        self.assertEqual(self.call("GET", "/nodes")[1], [])

    def test_empty_body_is_defaults(self) -> None:
        """An empty body creates a node with the group's defaults."""
        self.assertEqual(self.create(b"")[0], 201)

    def test_bad_bodies(self) -> None:
        """Bad JSON, non-objects, wrong types and unknown fields are 400 ErrorResponses."""
        self.assertError(self.create(b"{"), 400, "invalid_json")
        self.assertError(self.create(b"[]"), 400, "invalid_body")
        result = self.create(b'{"cpus": "2"}')
        self.assertError(result, 400, "invalid_body")
        self.assertIn("cpus", result[1]["error"])
        result = self.create(b'{"persistent": "false"}')
        self.assertError(result, 400, "invalid_body")
        result = self.create(b'{"colour": "red"}')
        self.assertError(result, 400, "invalid_body")
        self.assertIn("colour", result[1]["error"])
        self.assertError(self.create(b'{"tags": [1]}'), 400, "invalid_body")

    def test_limits_and_unsupported(self) -> None:
        """Limits above the group's and unsupported fields are 400; zero values are accepted."""
        self.assertError(self.create(b'{"cpus": 3}'), 400, "limit_exceeded")
        self.assertError(self.create(b'{"ram_bytes": 9999999999}'), 400, "limit_exceeded")
        self.assertError(self.create(b'{"gpu_count": 1}'), 400, "not_enough_gpus")
        code, _, _ = self.create(b'{"userdata": "", "ssh_keys": [], "gpu_count": 0, "secrets": null, "ip": ""}')
        self.assertEqual(code, 201)

    def test_query_validation(self) -> None:
        """Bad wait values and bad timeouts are 400."""
        self.assertError(self.create(query="?wait=later"), 400, "invalid_query")
        self.assertError(self.create(query="?wait=agent&timeout=soon"), 400, "invalid_query")
        self.assertError(self.create(query="?wait=agent&timeout=-1s"), 400, "invalid_query")
        self.assertEqual(self.h.driver.machines, [])

    def test_wait_timeout_is_408(self) -> None:
        """wait=agent with a timeout that passes answers 408 and leaves no node."""
        d = self.treq.request("POST", "http://x/hostgroup/demo/nodes?wait=agent&timeout=2s", data=b"{}")
        self.treq.flush()
        self.assertNoResult(d)
        self.h.reactor.advance(2)
        self.treq.flush()
        response = self.successResultOf(d)
        self.assertEqual(response.code, 408)
        body = json.loads(self.successResultOf(response.content()))
        self.assertEqual(body["code"], "wait_timeout")
        self.assertEqual(self.call("GET", "/nodes")[1], [])

    def test_wait_agent_answers_when_ready(self) -> None:
        """wait=agent answers 201 once the agent has answered."""
        d = self.treq.request("POST", "http://x/hostgroup/demo/nodes?wait=agent&timeout=1m30s", data=b"{}")
        self.treq.flush()
        self.assertNoResult(d)
        self.h.agents[0].ready()
        self.treq.flush()
        self.assertEqual(self.successResultOf(d).code, 201)

    def test_unknown_group_and_node(self) -> None:
        """Unknown groups and nodes are 404s."""
        self.assertError(self.call("POST", "/hostgroup/nope/nodes", b"{}"), 404, "hostgroup_not_found")
        self.assertError(self.call("GET", "/hostgroup/nope/nodes"), 404, "hostgroup_not_found")
        self.assertError(self.call("DELETE", "/hostgroup/demo/nodes/demo-9"), 404, "node_not_found")

    def test_protected_delete(self) -> None:
        """Deleting a protected node is 403."""
        self.create(b'{"protected": true}')
        self.assertError(self.call("DELETE", "/hostgroup/demo/nodes/demo-1"), 403, "protected")

    def test_filters(self) -> None:
        """tag and tag_prefix filter; both at once is 400."""
        self.create(b'{"tags": ["env=prod"]}')
        self.create(b'{"tags": ["env=dev"]}')
        names = lambda q: [n["hostname"] for n in self.call("GET", "/nodes" + q)[1]]
        self.assertEqual(names("?tag=env%3Dprod"), ["demo-1"])
        self.assertEqual(names("?tag_prefix=env%3D"), ["demo-1", "demo-2"])
        self.assertError(self.call("GET", "/nodes?tag=a&tag_prefix=b"), 400, "conflicting_filters")


class VmRouteTests(ApiTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.call("POST", "/hostgroup/demo/nodes", b"{}")

    def test_logs(self) -> None:
        """logs gives 20 lines by default, N when asked, all for 0; bad values are 400."""
        code, body, _ = self.call("GET", "/vm/demo-1/logs")
        self.assertEqual((code, body["hostname"], body["lines"]), (200, "demo-1", 20))
        self.assertTrue(body["content"].startswith("line 11\n"))
        self.assertEqual(self.call("GET", "/vm/demo-1/logs?lines=3")[1]["content"], "line 28\nline 29\nline 30\n")
        self.assertEqual(self.call("GET", "/vm/demo-1/logs?lines=0")[1]["lines"], 30)
        self.assertError(self.call("GET", "/vm/demo-1/logs?lines=-1"), 400, "invalid_query")
        self.assertError(self.call("GET", "/vm/demo-1/logs?lines=x"), 400, "invalid_query")
        self.assertError(self.call("GET", "/vm/nope/logs"), 404, "node_not_found")

    def test_health(self) -> None:
        """
        health answers 503 until the agent is up, then the agent's health (userdata_ran at once: the node
        has no userdata); HEAD follows.
        """
        self.assertError(self.call("GET", "/vm/demo-1/health"), 503, "agent_unavailable")
        self.assertEqual(self.call("HEAD", "/vm/demo-1/health")[:2], (503, b""))
        self.h.agents[0].ready()
        code, body, _ = self.call("GET", "/vm/demo-1/health")
        self.assertEqual(
            (code, body),
            (200, {"hostname": "demo-1", "agent_uptime": 5_000_000_000, "agent_version": "0.1.0",
                   "system_uptime": 7_000_000_000, "userdata_ran": True, "ip": ""}),
        )
        self.assertEqual(self.call("HEAD", "/vm/demo-1/health")[:2], (200, b""))
        self.assertError(self.call("GET", "/vm/nope/health"), 404, "node_not_found")


class AuthOffTests(ApiTestCase):
    def test_header_ignored(self) -> None:
        """With auth off, any Authorization header (even an empty Bearer) is ignored."""
        self.assertEqual(self.call("GET", "/nodes", headers={"Authorization": "Bearer "})[0], 200)
        self.assertEqual(self.call("GET", "/nodes", headers={"Authorization": "Bearer junk"})[0], 200)


class AuthOnTests(ApiTestCase):
    token = TOKEN

    def test_routes_need_token(self) -> None:
        """
        Every route but /healthz (/metrics too, by default) answers 401 without the right token, and so
        does a path that is no route (before its 404).
        """
        for method, path in [("GET", "/info"), ("GET", "/nodes"), ("POST", "/hostgroup/demo/nodes"),
                             ("GET", "/openapi.json"), ("GET", "/vm/demo-1/logs"), ("DELETE", "/hostgroup/demo/nodes/demo-1"),
                             ("GET", "/metrics"), ("GET", "/nope"), ("PUT", "/nodes")]:
            self.assertError(self.call(method, path), 401, "unauthorized")
            self.assertError(self.call(method, path, headers={"Authorization": "Bearer nope"}), 401, "unauthorized")
            self.assertError(self.call(method, path, headers={"Authorization": "Basic " + TOKEN}), 401, "unauthorized")
        self.assertEqual(self.call("GET", "/healthz")[0], 200)
        self.assertError(self.call("GET", "/nope", headers={"Authorization": "Bearer " + TOKEN}), 404, "route_not_found")

    def test_public_metrics(self) -> None:
        """With public_metrics, /metrics is read without a token; other routes still need one."""
        routes: list[Any] = []
        routes += MetaApi(self.metrics, lambda: routes, public_metrics=True).routes()
        self.treq = StubTreq(Api(self.h.reactor, routes, self.metrics, self.token).resource())
        self.assertEqual(self.call("GET", "/metrics")[0], 200)
        self.assertError(self.call("GET", "/info"), 401, "unauthorized")

    def test_token_accepted(self) -> None:
        """The right bearer token is accepted."""
        self.assertEqual(self.call("GET", "/nodes", headers={"Authorization": "Bearer " + TOKEN})[0], 200)
        self.assertEqual(self.call("GET", "/nodes", headers={"Authorization": "bearer " + TOKEN})[0], 200)


class HoldTests(ApiTestCase):
    """Requests naming a node hold it (its idle timer) while they are served."""

    token = TOKEN

    def setUp(self) -> None:
        super().setUp()
        self.held: list[str] = []
        self.released: list[str] = []

        def hold(hostname: str) -> Any:
            self.held.append(hostname)
            return lambda: self.released.append(hostname)

        routes: list[Any] = NodesApi(self.h.fleet).routes() + VmApi(self.h.fleet).routes()
        self.treq = StubTreq(Api(self.h.reactor, routes, self.metrics, self.token, hold).resource())

    def test_held_while_served(self) -> None:
        """An authenticated request naming a node holds it and releases it once answered, whatever the answer."""
        self.call("GET", "/vm/demo-7", headers={"Authorization": f"Bearer {TOKEN}"})
        self.assertEqual((self.held, self.released), (["demo-7"], ["demo-7"]))

    def test_not_held(self) -> None:
        """Requests that name no node, or that are not authenticated, hold nothing."""
        self.call("GET", "/nodes", headers={"Authorization": f"Bearer {TOKEN}"})
        self.call("GET", "/vm/demo-7")
        self.assertEqual((self.held, self.released), ([], []))


class CrossOriginTests(ApiTestCase):
    """
    Browsers' cross-origin requests and other hosts' names, through the view (requests that do not come
    through the daemon's streaming site are checked there by the same gate).
    """

    def setUp(self) -> None:
        super().setUp()
        routes: list[Any] = NodesApi(self.h.fleet).routes() + VmApi(self.h.fleet).routes()
        listener = ApiConfig(bind_address="127.0.0.1", port=8080, allowed_origins=("https://ui.example.com",))
        self.treq = StubTreq(Api(self.h.reactor, routes, self.metrics, None, listener=listener).resource())

    def call_at(self, method: str, path: str, headers: dict[str, str], body: bytes | None = b"{}") -> tuple[int, Any, Any]:
        d = self.treq.request(method, "http://127.0.0.1:8080" + path, data=body, headers=headers)
        self.treq.flush()
        response = self.successResultOf(d)
        content = self.successResultOf(response.content())
        return response.code, json.loads(content) if content else None, response

    def test_cross_origin_create(self) -> None:
        """A create from a foreign origin, or marked cross-site, is 403 forbidden_origin and nothing is made."""
        for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                        {"Origin": "http://evil.example", "Content-Type": "text/plain"}):
            self.assertError(self.call_at("POST", "/hostgroup/demo/nodes", headers), 403, "forbidden_origin")
        self.assertError(self.call_at("DELETE", "/hostgroup/demo/nodes/demo-1", {"Origin": "http://evil.example"}),
                         403, "forbidden_origin")
        self.assertEqual((self.h.fleet.list(), self.h.driver.machines), ([], []))

    def test_clients_without_origin(self) -> None:
        """Clients that send no Origin (curl, the SDKs, vmctl), the allowed origin and the daemon's own are served."""
        for headers in ({}, {"Origin": "https://ui.example.com"}, {"Origin": "http://127.0.0.1:8080"}):
            self.assertEqual(self.call_at("POST", "/hostgroup/demo/nodes", headers)[0], 201)
        self.assertEqual(len(self.h.fleet.list()), 3)

    def test_reads_from_any_origin(self) -> None:
        """A GET from a foreign origin is answered (the browser does not hand it to the page)."""
        self.assertEqual(self.call_at("GET", "/nodes", {"Origin": "http://evil.example"}, None)[0], 200)

    def test_rebinding_host(self) -> None:
        """A Host that names another server (DNS rebinding) is 421 invalid_host, on reads too."""
        d = self.treq.request("GET", "http://evil.example:8080/nodes")
        self.treq.flush()
        response = self.successResultOf(d)
        self.assertEqual(response.code, 421)
        self.assertEqual(json.loads(self.successResultOf(response.content()))["code"], "invalid_host")


class HeaderTimeTests(SynchronousTestCase):
    """
    The daemon's site (a StreamingSite planned by the Api) refuses before any byte of the body is stored:
    the token, the Origin, the Host, the route's body limit.
    """

    def setUp(self) -> None:
        self.h = FleetHarness(self.mktemp())
        self.h.fleet.startService()
        self.metrics = Metrics()
        listener = ApiConfig(bind_address="127.0.0.1", port=8080, auth=AuthConfig(enabled=True))
        api = Api(self.h.reactor, fleet_routes(self.h, self.metrics), self.metrics, TOKEN, listener=listener)
        self.site = RecordingSite(api.resource(), api.plan_body, reactor=self.h.reactor)
        self.site.files = []
        self.channel, self.transport = open_connection(self, self.site)

    def send(self, data: bytes) -> None:
        if not self.transport.disconnecting:
            self.channel.dataReceived(data)
        self.h.reactor.advance(0)

    def answer(self) -> tuple[int, dict[bytes, bytes], Any]:
        status, headers, body = parse_response(self.transport.value())
        return status, headers, json.loads(body)

    def test_unauthenticated_body_never_stored(self) -> None:
        """
        An unauthenticated create announcing a 50 GB body is answered 401 as soon as its headers are in,
        with a few bytes sent: no file made to hold a body, nothing created, the connection closed.
        """
        self.send(b"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                  b"Content-Length: 50000000000\r\n\r\n{\"userdata\": \"")
        status, headers, body = self.answer()
        self.assertEqual((status, body["code"], headers[b"connection"]), (401, "unauthorized", b"close"))
        self.assertEqual(self.site.files, [])
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(self.h.fleet.list(), [])

    def test_unauthenticated_chunked_unknown_route(self) -> None:
        """An unauthenticated chunked body to a path that is no route is refused 401 at once, never stored."""
        self.send(b"PUT /anything HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"10\r\n0123456789abcdef\r\n")
        self.assertEqual(self.answer()[0], 401)
        self.assertEqual(self.site.files, [])

    def test_too_large_declared(self) -> None:
        """An authenticated create announcing more than MAX_JSON_BODY is 413 body_too_large before its body."""
        self.send(b"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer "
                  + TOKEN.encode() + b"\r\nContent-Length: %d\r\n\r\n{" % (MAX_JSON_BODY + 1))
        status, _, body = self.answer()
        self.assertEqual((status, body["code"]), (413, "body_too_large"))
        self.assertEqual(self.site.files, [])

    def test_too_large_chunked(self) -> None:
        """An authenticated chunked create body is cut off at MAX_JSON_BODY: 413, at most the limit stored."""
        self.send(b"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer "
                  + TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b" " * 65536
        for _ in range(MAX_JSON_BODY // len(chunk) + 2):
            self.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        status, _, body = self.answer()
        self.assertEqual((status, body["code"]), (413, "body_too_large"))
        self.assertLessEqual(sum(len(f.written) for f in self.site.files), MAX_JSON_BODY)
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(self.h.fleet.list(), [])

    def test_foreign_origin_and_host(self) -> None:
        """A foreign Origin (403) and a rebinding Host (421) are refused at header time, even with the token."""
        auth = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        self.send(b"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nOrigin: http://evil.example\r\n"
                  + auth + b"Content-Length: 2\r\n\r\n{}")
        status, _, body = self.answer()
        self.assertEqual((status, body["code"]), (403, "forbidden_origin"))
        self.channel, self.transport = open_connection(self, self.site)
        self.send(b"GET /nodes HTTP/1.1\r\nHost: rebound.evil.example:8080\r\n" + auth + b"\r\n")
        status, _, body = self.answer()
        self.assertEqual((status, body["code"]), (421, "invalid_host"))
        self.assertTrue(self.transport.value().startswith(b"HTTP/1.1 421 Misdirected Request\r\n"))
        self.assertEqual(self.h.fleet.list(), [])

    def test_served(self) -> None:
        """A curl-like create (no Origin, the token, a small body) is served and the connection kept."""
        self.send(b"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer "
                  + TOKEN.encode() + b"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 2\r\n\r\n{}")
        self.assertEqual(self.answer()[0], 201)
        self.assertFalse(self.transport.disconnecting)

    def test_refusals_counted(self) -> None:
        """Header-time refusals are counted under their route (or unmatched) and a fixed method label."""
        self.send(b"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Length: 2\r\n\r\n{}")
        self.channel, self.transport = open_connection(self, self.site)
        self.send(b"MKCOL /x HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n")
        text = self.metrics.render()[0].decode()
        self.assertIn('vmservice_http_requests_total{method="POST",route="/hostgroup/{name}/nodes",status="401"} 1.0',
                      text)
        self.assertIn('vmservice_http_requests_total{method="OTHER",route="unmatched",status="401"} 1.0', text)


class AuditTests(SynchronousTestCase):
    """
    The audit log through the daemon's site: one line for each request that can change something, answered or
    refused (at header time too), naming the token by its label, never holding a body or a query.
    """

    def setUp(self) -> None:
        self.h = FleetHarness(self.mktemp())
        self.h.fleet.startService()
        self.path = os.path.join(self.mktemp(), "audit.log")
        metrics = Metrics()
        routes = fleet_routes(self.h, metrics)
        listener = ApiConfig(bind_address="127.0.0.1", port=8080, auth=AuthConfig(enabled=True))
        tokens = Tokens("", lambda path: (Token(TOKEN.encode(), "ci-2026"),))
        tokens.load()
        self.audit = AuditLog(self.path, 1 << 20, 2)
        api = Api(self.h.reactor, routes, metrics, tokens, listener=listener, audit=self.audit)
        self.site = RecordingSite(api.resource(), api.plan_body, reactor=self.h.reactor)
        self.site.files = []

    def request(self, data: bytes) -> int:
        channel, transport = open_connection(self, self.site)
        channel.dataReceived(data)
        self.h.reactor.advance(0)
        return parse_response(transport.value())[0]

    def lines(self) -> list[dict[str, Any]]:
        with open(self.path, "rb") as f:
            return [json.loads(line) for line in f]

    def test_changes_recorded(self) -> None:
        """A create and a delete are recorded with the token's label, route template, target and status."""
        auth = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        body = b'{"userdata": "echo do-not-log-me"}'
        self.assertEqual(self.request(b"POST /hostgroup/demo/nodes?timeout=1234s HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                                      + auth + b"Content-Length: %d\r\n\r\n" % len(body) + body), 201)
        self.assertEqual(self.request(b"GET /nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n" + auth + b"\r\n"), 200)
        self.assertEqual(self.request(b"DELETE /hostgroup/demo/nodes/demo-1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                                      + auth + b"\r\n"), 200)
        lines = self.lines()
        self.assertEqual([(line["method"], line["route"], line["target"], line["status"], line["token"])
                          for line in lines], [
            ("POST", "/hostgroup/{name}/nodes", {"name": "demo"}, 201, "ci-2026"),
            ("DELETE", "/hostgroup/{name}/nodes/{node}", {"name": "demo", "node": "demo-1"}, 200, "ci-2026"),
        ])
        self.assertTrue(lines[0]["peer"].startswith("192.168.1.1:") or ":" in lines[0]["peer"])
        with open(self.path, "rb") as f:
            text = f.read()
        for secret in (b"do-not-log-me", TOKEN.encode(), b"1234"):
            self.assertNotIn(secret, text)

    def test_refusals_recorded(self) -> None:
        """Refusals at header time (no token, a foreign Origin) and of unknown routes are recorded with their code."""
        self.request(b"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Length: 2\r\n\r\n{}")
        self.request(b"POST /hostgroup/demo/nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nOrigin: http://evil.example\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 2\r\n\r\n{}")
        self.request(b"POST /nowhere HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer " + TOKEN.encode()
                     + b"\r\nContent-Length: 0\r\n\r\n")
        self.assertEqual([(line["route"], line["status"], line["code"], line["token"]) for line in self.lines()], [
            ("/hostgroup/{name}/nodes", 401, "unauthorized", None),
            ("/hostgroup/{name}/nodes", 403, "forbidden_origin", "ci-2026"),
            ("unmatched", 404, "route_not_found", "ci-2026"),
        ])
        self.assertEqual(self.h.fleet.list(), [])

    def test_reads_not_recorded(self) -> None:
        """GET and HEAD requests, answered or refused, write nothing."""
        self.request(b"GET /nodes HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n")
        self.request(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n")
        self.assertEqual(self.lines(), [])
