"""
Servers on loopback for the client tests (:mod:`tests.integration.test_client`, and the ``vmctl`` tests
of :mod:`tests.integration.cli`): a resource served by a real ``Site`` on the global reactor over TCP or
a UNIX socket (:func:`serve`, every connection closed when the test ends), the daemon's API application
on a fleet of fakes (:class:`LoopbackApi`), a resource that records what it was asked
(:class:`Recorder`), and the real exec and watch routes with a fake agent the test drives
(:class:`ExecLoopbackCase`, :class:`WatchLoopbackCase`).
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.testing import MemoryReactorClock
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import Site

from tests.fakes import FleetHarness
from tests.pipes import Pipes
from vmservice.api.app import Api
from vmservice.api.background import BackgroundApi
from vmservice.api.resources import every_route
from vmservice.client import Client, ExecRecord
from vmservice.metrics import Metrics
from vmservice.secretstore import SecretStore

#: The API token of the tests whose :class:`LoopbackApi` requires one.
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


async def serve(test: TestCase, resource: Any, unix: bool = False, site: Site | None = None) -> str:
    """
    Serve ``resource`` with a real ``Site`` on the global reactor, on a
    loopback TCP port or a UNIX socket in a fresh temporary directory, and
    register cleanups that close every connection, the port and the
    directory even if the test fails.

    :param site: the site to serve instead of a plain ``Site(resource)``
        (a :class:`~vmservice.api.streaming.StreamingSite` for streamed bodies).
    :return: the address a client uses: ``http://127.0.0.1:<port>`` or the
        socket path.
    """
    factory = _TrackingFactory(site if site is not None else Site(resource))
    test.served = getattr(test, "served", []) + [factory]  # type: ignore[attr-defined]
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


def state_dir(test: TestCase) -> str:
    """
    A fresh state directory for a :class:`LoopbackApi`, removed after the test:
    short enough for the fleet's UNIX socket paths, which a trial temporary
    directory named after a test under ``tests.integration`` may not be.
    """
    path = tempfile.mkdtemp(prefix="vmc-", dir="/tmp")
    test.addCleanup(shutil.rmtree, path, True)
    return path


class LoopbackApi:
    """
    The daemon's API application (every route) on a fleet of fakes (see
    :class:`tests.fakes.FleetHarness`), ready to be served.
    """

    def __init__(self, state_dir: str, token: str | None = None) -> None:
        self.h = FleetHarness(state_dir)
        self.h.fleet.startService()
        metrics = Metrics()
        self.secrets = SecretStore(state_dir, self.h.reactor)
        routes = every_route(self.h.fleet, self.h.reactor, metrics, self.secrets)
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


class Recorder(Resource):
    """Answers every request with a set status and body, keeping what it saw."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bytes, bytes, Any]] = []
        self.status = 200
        self.body = b"{}"
        self.content_type = b"application/json"
        self.bodies: list[bytes] = []
        self.extra: dict[bytes, bytes] = {}

    def render(self, request: Any) -> bytes:
        self.seen.append((request.method, request.uri, request.requestHeaders))
        self.bodies.append(request.content.read())
        request.setResponseCode(self.status)
        request.setHeader(b"Content-Type", self.content_type)
        for name, value in self.extra.items():
            request.setHeader(name, value)
        return self.body


class ExecLoopbackCase(Pipes, TestCase):
    """
    The real exec route on a real ``StreamingSite`` on loopback, with a fake
    agent whose exec stream the test drives as the guest would.
    """

    async def setUp(self) -> None:
        from tests.fakes import OneNodeFleet
        from vmservice.api.execution import ExecApi
        from vmservice.api.streaming import StreamingSite

        self.fleet = OneNodeFleet()
        clock = MemoryReactorClock()
        clock.advance(1_700_000_000)
        api = Api(clock, ExecApi(self.fleet, clock, BackgroundApi(self.fleet)).routes(), Metrics(), None)  # type: ignore[arg-type]
        site = StreamingSite(api.resource(), api.plan_body)
        self.url = await serve(self, None, site=site)
        self.client = Client(reactor, self.url)
        self.addCleanup(lambda: Deferred.fromCoroutine(self.client.close()))
        self.records: list[ExecRecord] = []

    def run_exec(self, *args: Any, **kwargs: Any) -> Deferred[ExecRecord]:
        kwargs.setdefault("on_record", self.records.append)
        return Deferred.fromCoroutine(self.client.exec("demo-1", *args, **kwargs))

    async def stream(self, count: int = 1) -> Any:
        await until(lambda: len(self.fleet.agent.streams) >= count)
        return self.fleet.agent.streams[count - 1]

    def cut_connections(self) -> None:
        """Abort every connection the server has, as a daemon that dies would."""
        for factory in self.served:  # type: ignore[attr-defined]
            for protocol in list(factory.protocols):
                protocol.transport.abortConnection()


class WatchLoopbackCase(TestCase):
    """
    The real watch route on loopback, with a fake agent whose watch stream the
    test drives as the guest would.
    """

    async def setUp(self) -> None:
        from tests.fakes import OneNodeFleet
        from vmservice.api.watching import WatchApi

        self.fleet = OneNodeFleet()
        clock = MemoryReactorClock()
        clock.advance(1_700_000_000)
        api = Api(clock, WatchApi(self.fleet, clock).routes(), Metrics(), None)  # type: ignore[arg-type]
        self.url = await serve(self, api.resource())
        self.client = Client(reactor, self.url)
        self.addCleanup(lambda: Deferred.fromCoroutine(self.client.close()))
        self.events: list[dict[str, Any]] = []

    def consume(self, *paths: str, stop_after: int | None = None, **options: Any) -> Deferred[None]:
        """Iterate a watch in the background, keeping its events; leave the loop after ``stop_after``."""

        async def run() -> None:
            async for event in self.client.watch("demo-1", list(paths), **options):
                self.events.append(event)
                if stop_after is not None and len(self.events) >= stop_after:
                    break

        return Deferred.fromCoroutine(run())

    async def stream(self, count: int = 1) -> Any:
        await until(lambda: len(self.fleet.agent.streams) >= count)
        return self.fleet.agent.streams[count - 1]

    @staticmethod
    def message(**fields: Any) -> bytes:
        from vmservice.wire.messages import encode_message

        return encode_message(fields)

    def event(self, kind: str, path: str) -> bytes:
        return self.message(type=kind, path=path, size=0, is_dir=False)
