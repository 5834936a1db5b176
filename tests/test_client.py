"""
Tests for :mod:`vmservice.client`: the client against the real API app
served on loopback (TCP and a UNIX socket) by a real ``Site``, with the
fleet on fakes; and its pure parts (address rule, error bodies, query
parameters) on their own.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.resource import Resource
from twisted.web.server import Site

from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.api.meta import MetaApi
from vmservice.api.nodes import NodesApi
from vmservice.api.vm import VmApi
from vmservice.client import ApiError, Client, ConnectFailed, _params, _path, is_unix_socket, socket_path
from vmservice.metrics import Metrics

TOKEN = "client-test-token"


class _Tracked(ProtocolWrapper):
    """A server connection whose end can be waited for."""

    def __init__(self, factory: WrappingFactory, wrapped: Any) -> None:
        super().__init__(factory, wrapped)
        self.lost: Deferred[None] = Deferred()

    def connectionLost(self, reason: Failure) -> None:
        super().connectionLost(reason)
        self.lost.callback(None)


class _TrackingFactory(WrappingFactory):
    protocol = _Tracked


async def serve(test: TestCase, resource: Any, unix: bool = False) -> str:
    """
    Serve ``resource`` with a real ``Site`` on the global reactor, on a
    loopback TCP port or a UNIX socket in a fresh temporary directory, and
    register cleanups that close every connection, the port and the
    directory even if the test fails.

    :return: the address a client uses: ``http://127.0.0.1:<port>`` or the
        socket path.
    """
    factory = _TrackingFactory(Site(resource))
    if unix:
        directory = tempfile.mkdtemp(prefix="vmctl-")
        test.addCleanup(shutil.rmtree, directory, True)
        path = directory + "/api.sock"
        port = reactor.listenUNIX(path, factory)
        address = path
    else:
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        address = f"http://127.0.0.1:{port.getHost().port}"

    async def stop() -> None:
        for protocol in list(factory.protocols):
            protocol.transport.loseConnection()
            await protocol.lost
        await port.stopListening()

    test.addCleanup(lambda: Deferred.fromCoroutine(stop()))
    return address


class LoopbackApi:
    """
    The daemon's API application (meta, nodes and vm routes) on a fleet of
    fakes (see :class:`tests.fakes.FleetHarness`), ready to be served.
    """

    def __init__(self, state_dir: str, token: str | None = None) -> None:
        self.h = FleetHarness(state_dir)
        self.h.fleet.startService()
        metrics = Metrics()
        routes: list[Any] = []
        routes += MetaApi(metrics, lambda: routes).routes()
        routes += NodesApi(self.h.fleet).routes() + VmApi(self.h.fleet).routes()
        self.api = Api(self.h.reactor, routes, metrics, token)

    async def serve(self, test: TestCase, unix: bool = False) -> str:
        return await serve(test, self.api.resource(), unix)


async def until(condition: Any, timeout: float = 5.0) -> None:
    """Let the real reactor run until ``condition()`` holds (a request reached the fakes)."""
    waited = 0.0
    while not condition():
        if waited > timeout:
            raise AssertionError("condition not reached")
        await deferLater(reactor, 0.01, lambda: None)
        waited += 0.01


class ClientTestCase(TestCase):
    token: str | None = None
    unix = False

    async def setUp(self) -> None:
        self.loop = LoopbackApi(self.mktemp(), self.token)
        self.h = self.loop.h
        self.url = await self.loop.serve(self, self.unix)
        self.client = self.make_client(self.token)

    def make_client(self, token: str | None, url: str | None = None) -> Client:
        client = Client(reactor, url or self.url, token)
        self.addCleanup(lambda: Deferred.fromCoroutine(client.close()))
        return client

    async def assertApiError(self, coroutine: Any, status: int, code: str | None) -> ApiError:
        try:
            await coroutine
        except ApiError as error:
            self.assertEqual((error.status, error.code), (status, code), error.message)
            return error
        self.fail("no ApiError raised")


class ClientTests(ClientTestCase):
    async def test_info(self) -> None:
        """info() answers the decoded /info object."""
        info = await self.client.info()
        self.assertEqual(info["version"], "0.1.0")
        self.assertEqual((info["platform"], info["arch"]), ("linux", "amd64"))

    async def test_hostgroups(self) -> None:
        """hostgroups() lists the configured groups with their limits."""
        groups = await self.client.hostgroups()
        self.assertEqual([g["name"] for g in groups], ["demo", "other"])
        self.assertEqual(groups[0]["ram_bytes"], 512 * 1024 * 1024)

    async def test_create_list_delete(self) -> None:
        """A node created with a body is listed (by group, tag and prefix) and deleted."""
        node = await self.client.create_node("demo", {"tags": ["team-a", "x"], "cpus": 1})
        self.assertEqual(node["hostname"], "demo-1")
        await self.client.create_node("other")
        self.assertEqual([n["hostname"] for n in await self.client.nodes()], ["demo-1", "other-1"])
        listed = await self.client.nodes("demo")
        self.assertEqual([(n["hostname"], n["cpus"], n["tags"]) for n in listed], [("demo-1", 1, ["team-a", "x"])])
        self.assertEqual([n["hostname"] for n in await self.client.nodes(tag="x")], ["demo-1"])
        self.assertEqual([n["hostname"] for n in await self.client.nodes(tag_prefix="team-")], ["demo-1"])
        self.assertEqual(await self.client.nodes("other", tag="x"), [])
        result = await self.client.delete_node("demo", "demo-1")
        self.assertEqual(result["message"], "node demo-1 deleted")
        self.assertEqual([n["hostname"] for n in await self.client.nodes()], ["other-1"])

    async def test_error_response(self) -> None:
        """A non-2xx answer raises ApiError with the ErrorResponse's status, code and message."""
        error = await self.assertApiError(self.client.create_node("demo", {"cpus": 3}), 400, "limit_exceeded")
        self.assertIn("cpus", error.message)
        self.assertEqual(str(error), error.message)
        await self.assertApiError(self.client.create_node("nope"), 404, "hostgroup_not_found")
        await self.assertApiError(self.client.delete_node("demo", "demo-9"), 404, "node_not_found")

    async def test_wait_and_timeout_are_sent(self) -> None:
        """create_node(wait="agent") answers only once the agent is ready; past the timeout it is 408."""
        pending = Deferred.fromCoroutine(self.client.create_node("demo", wait="agent", timeout="1s"))
        await until(lambda: self.h.agents)
        self.assertNoResult(pending)
        self.h.agents[-1].ready()
        self.assertEqual((await pending)["hostname"], "demo-1")
        late = Deferred.fromCoroutine(self.client.create_node("demo", wait="agent", timeout="1s"))
        await until(lambda: len(self.h.agents) == 2)
        self.h.reactor.advance(1.5)
        await self.assertApiError(late, 408, "wait_timeout")

    async def test_logs(self) -> None:
        """logs() gives the console's last lines, the daemon's default without ``lines``."""
        await self.client.create_node("demo")
        logs = await self.client.logs("demo-1", 3)
        self.assertEqual((logs["lines"], logs["content"]), (3, "line 28\nline 29\nline 30\n"))
        self.assertEqual((await self.client.logs("demo-1"))["lines"], 20)
        self.assertEqual((await self.client.logs("demo-1", 0))["lines"], 30)
        await self.assertApiError(self.client.logs("demo-2"), 404, "node_not_found")

    async def test_health(self) -> None:
        """healthy() is False and health() a 503 ApiError until the agent answers; then True and the health."""
        await self.client.create_node("demo")
        self.assertIs(await self.client.healthy("demo-1"), False)
        await self.assertApiError(self.client.health("demo-1"), 503, "agent_unavailable")
        self.h.agents[-1].ready()
        self.assertIs(await self.client.healthy("demo-1"), True)
        health = await self.client.health("demo-1")
        self.assertEqual((health["hostname"], health["agent_uptime"]), ("demo-1", 5_000_000_000))

    async def test_healthy_unknown_node(self) -> None:
        """healthy() of an unknown node raises ApiError 404 (a HEAD answer has no body to read a code from)."""
        await self.assertApiError(self.client.healthy("ghost"), 404, None)


class AuthTests(ClientTestCase):
    token = TOKEN

    async def test_token_sent(self) -> None:
        """With the daemon's token, calls succeed."""
        self.assertEqual((await self.client.info())["version"], "0.1.0")

    async def test_no_or_wrong_token(self) -> None:
        """Without a token, or with a wrong one, calls raise ApiError 401 unauthorized."""
        await self.assertApiError(self.make_client(None).info(), 401, "unauthorized")
        await self.assertApiError(self.make_client("wrong").hostgroups(), 401, "unauthorized")


class UnixSocketTests(ClientTestCase):
    unix = True

    async def test_over_socket(self) -> None:
        """The client reaches a daemon on a UNIX socket, by plain path and by ``unix://`` address."""
        self.assertTrue(self.url.startswith("/"))
        node = await self.client.create_node("demo", {"tags": ["s"]})
        self.assertEqual(node["hostname"], "demo-1")
        other = self.make_client(None, "unix://" + self.url)
        self.assertEqual([n["hostname"] for n in await other.nodes(tag="s")], ["demo-1"])

    async def test_missing_socket(self) -> None:
        """A socket path where nothing listens raises ConnectFailed naming the path."""
        missing = self.url + ".gone.sock"
        try:
            await self.make_client(None, missing).info()
        except ConnectFailed as error:
            self.assertEqual(error.url, missing)
            self.assertIn(missing, str(error))
        else:
            self.fail("no ConnectFailed")


class _Recorder(Resource):
    """Answers every request with a set status and body, keeping what it saw."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bytes, bytes, Any]] = []
        self.status = 200
        self.body = b"{}"
        self.content_type = b"application/json"

    def render(self, request: Any) -> bytes:
        self.seen.append((request.method, request.uri, request.requestHeaders))
        request.setResponseCode(self.status)
        request.setHeader(b"Content-Type", self.content_type)
        return self.body


class WireTests(TestCase):
    """What the client puts on the wire and how it reads odd answers, seen by a recording server."""

    async def setUp(self) -> None:
        self.server = _Recorder()
        self.url = await serve(self, self.server)

    def client(self, token: str | None = None, url: str | None = None) -> Client:
        client = Client(reactor, url or self.url, token)
        self.addCleanup(lambda: Deferred.fromCoroutine(client.close()))
        return client

    async def test_authorization_only_with_token(self) -> None:
        """``Authorization: Bearer <token>`` is sent only when a token is set."""
        await self.client().info()
        await self.client("abc").info()
        self.assertIsNone(self.server.seen[0][2].getRawHeaders(b"authorization"))
        self.assertEqual(self.server.seen[1][2].getRawHeaders(b"authorization"), [b"Bearer abc"])

    async def test_paths_and_queries(self) -> None:
        """Path segments are quoted whole; None parameters are left out; a trailing slash in the URL is dropped."""
        client = self.client(url=self.url + "/")
        await client.logs("a/b c?")
        self.server.body = b"[]"
        await client.nodes("g 1", tag="x y")
        await client.nodes(tag_prefix="p")
        self.server.body = b"{}"
        await client.create_node("g", wait="agent")
        self.assertEqual(
            [(method, uri) for method, uri, _ in self.server.seen],
            [
                (b"GET", b"/vm/a%2Fb%20c%3F/logs"),
                (b"GET", b"/hostgroup/g%201/nodes?tag=x+y"),
                (b"GET", b"/nodes?tag_prefix=p"),
                (b"POST", b"/hostgroup/g/nodes?wait=agent"),
            ],
        )
        self.assertEqual(self.server.seen[-1][2].getRawHeaders(b"content-type")[0].split(b";")[0], b"application/json")

    async def test_text_error_body(self) -> None:
        """An error body that is not JSON becomes the message, without a code."""
        self.server.status, self.server.body, self.server.content_type = 502, b"upstream broke\n", b"text/plain"
        try:
            await self.client().info()
        except ApiError as error:
            self.assertEqual((error.status, error.code, error.message), (502, None, "upstream broke"))
        else:
            self.fail("no ApiError")

    async def test_not_json_success(self) -> None:
        """A 2xx answer that is not JSON raises ApiError ``invalid_response`` rather than a decode error."""
        self.server.body = b"<html>"
        try:
            await self.client().info()
        except ApiError as error:
            self.assertEqual((error.status, error.code), (200, "invalid_response"))
        else:
            self.fail("no ApiError")

    async def test_refused(self) -> None:
        """A TCP port where nothing listens raises ConnectFailed naming the URL."""
        probe = reactor.listenTCP(0, Site(Resource()), interface="127.0.0.1")
        url = f"http://127.0.0.1:{probe.getHost().port}"
        await probe.stopListening()
        try:
            await self.client(url=url).info()
        except ConnectFailed as error:
            self.assertEqual(str(error), f"cannot connect to {url}: Connection refused")
        else:
            self.fail("no ConnectFailed")


class PureTests(SynchronousTestCase):
    def test_socket_rule(self) -> None:
        """Socket addresses follow the shared rule: / ./ ../ ~/ unix:// prefixes or a .sock ending."""
        for url in ("/run/v.sock", "./a", "../a", "~/a", "unix:///run/x", "api.sock", "unix://rel"):
            self.assertTrue(is_unix_socket(url), url)
        for url in ("http://127.0.0.1:8080", "https://h:1/", "127.0.0.1:8080", "sock", "http://h/x.sock.d"):
            self.assertFalse(is_unix_socket(url), url)

    def test_socket_path(self) -> None:
        """``unix://`` is stripped and ``~`` expanded to the home directory."""
        self.assertEqual(socket_path("unix:///run/v.sock"), "/run/v.sock")
        self.assertEqual(socket_path("./v.sock"), "./v.sock")
        self.assertFalse(socket_path("~/v.sock").startswith("~"))

    @given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
    def test_unix_prefix_always_socket(self, rest: str) -> None:
        """Anything behind ``unix://`` is a socket, and its path is exactly what follows."""
        self.assertTrue(is_unix_socket("unix://" + rest))
        if not rest.startswith("~"):
            self.assertEqual(socket_path("unix://" + rest), rest)

    @given(st.integers(400, 599), st.text(max_size=40), st.one_of(st.none(), st.text(min_size=1, max_size=20)))
    def test_error_body_round_trip(self, status: int, message: str, code: str | None) -> None:
        """An ErrorResponse body gives back its message and code exactly."""
        body = json.dumps({"error": message, "code": code} if code else {"error": message}).encode()
        error = ApiError.from_body(status, body)
        self.assertEqual((error.status, error.code, error.message), (status, code, message))

    @given(st.integers(400, 599), st.binary(max_size=60))
    def test_any_error_body(self, status: int, body: bytes) -> None:
        """Any body at all gives an ApiError with a non-empty message, never an exception."""
        error = ApiError.from_body(status, body)
        self.assertEqual(error.status, status)
        self.assertTrue(error.message)

    def test_empty_error_body(self) -> None:
        """An empty error body is described by its status phrase."""
        self.assertEqual(ApiError.from_body(404, b"").message, "Not Found")
        self.assertEqual(ApiError.from_body(599, b"").message, "HTTP 599")

    @given(st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4))
    def test_path_segments_quoted(self, segments: list[str]) -> None:
        """Each segment becomes exactly one path segment, whatever characters it holds."""
        from urllib.parse import unquote

        path = _path(*segments)
        self.assertEqual([unquote(part) for part in path.split("/")[1:]], segments)

    def test_params(self) -> None:
        """None values are left out, lists repeat their key and numbers become text."""
        self.assertEqual(
            _params({"a": None, "b": "x", "c": ["1", "2"], "lines": 0}),
            [("b", "x"), ("c", "1"), ("c", "2"), ("lines", "0")],
        )
        self.assertEqual(_params(None), [])
