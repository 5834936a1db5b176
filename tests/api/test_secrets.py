"""
Tests for ``/secrets`` (:mod:`vmservice.api.secrets`) and the parsers of
its bodies (:func:`vmservice.api.inputs.secrets.secret_create`,
:func:`~vmservice.api.inputs.secrets.secret_update`), through a real Site and Agent
over in-memory connections, with a real store in a temporary directory and
the fleet on fakes.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from io import BytesIO
from typing import Any

from attrs import evolve
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.http_headers import Headers
from twisted.web.test.requesthelper import DummyRequest

from tests.nodes.fleets import fleet_of
from tests.api.connections import parse_response
from tests.api.fleet_api import ApiTestCase
from tests.fakes import FleetHarness
from vmservice import durable
from vmservice.api.app import Api
from vmservice.api.inputs.secrets import MAX_SECRET_BODY, secret_create, secret_update
from vmservice.api.openapi import openapi_document
from vmservice.api.resources import every_route
from vmservice.api.streaming import StreamingSite
from vmservice.errors import BadRequest
from vmservice.metrics import Metrics
from vmservice.nodes.model import CreateRequest, Wait
from vmservice.secretstore import MAX_SECRET_SIZE, SecretChange, SecretSpec, SecretStore

CONTENT = b"hunter2-the-content"
ENCODED = base64.b64encode(CONTENT).decode()


def _request(body: Any) -> DummyRequest:
    request = DummyRequest([b""])
    request.method = b"POST"
    request.content = BytesIO(body if isinstance(body, bytes) else json.dumps(body).encode())
    return request


class SecretParserTests(SynchronousTestCase):
    """The bodies of create and update, parsed in one place."""

    def refused(self, parse: Any, body: Any, code: str) -> BadRequest:
        error = self.assertRaises(BadRequest, parse, _request(body))
        self.assertEqual(error.code, code)
        self.assertNotIn("hunter2", error.message)
        self.assertNotIn(ENCODED, error.message)
        return error

    def test_create(self) -> None:
        """name, base64 data, octal permissions, uid and gid; defaults 0600, 0, 0."""
        self.assertEqual(secret_create(_request({"name": "k", "data": ENCODED})), SecretSpec("k", CONTENT, 0o600, 0, 0))
        spec = secret_create(_request({"name": "k", "data": ENCODED, "permissions": "0440", "uid": 1000, "gid": 2}))
        self.assertEqual(spec, SecretSpec("k", CONTENT, 0o440, 1000, 2))
        self.assertEqual(secret_create(_request({"name": "k", "data": "", "permissions": "400"})).permissions, 0o400)
        wrapped = "\n".join(ENCODED[i:i + 8] for i in range(0, len(ENCODED), 8))
        self.assertEqual(secret_create(_request({"name": "k", "data": wrapped})).data, CONTENT)

    def test_create_refusals(self) -> None:
        """Bad base64, a missing or non-string data, bad modes and ids, unknown fields are 400s that quote no content."""
        self.refused(secret_create, {"name": "k", "data": ENCODED + "!"}, "invalid_base64")
        self.refused(secret_create, {"name": "k", "data": ENCODED[:-1]}, "invalid_base64")
        self.refused(secret_create, {"name": "k", "data": "aHVudGVyMg==\u00e9"}, "invalid_base64")
        self.refused(secret_create, {"name": "k"}, "invalid_body")
        self.refused(secret_create, {"name": "k", "data": 12345}, "invalid_body")
        self.refused(secret_create, {"data": ENCODED}, "invalid_body")
        self.refused(secret_create, b"", "invalid_body")
        self.refused(secret_create, b"[1]", "invalid_body")
        self.refused(secret_create, b"{", "invalid_json")
        for permissions in ("0800", "1777", "rw", "", "00600"):
            self.refused(secret_create, {"name": "k", "data": ENCODED, "permissions": permissions}, "invalid_body")
        for uid in (-1, 2**32 - 1, "0", True):
            self.refused(secret_create, {"name": "k", "data": ENCODED, "uid": uid}, "invalid_body")
        self.refused(secret_create, {"name": "k", "data": ENCODED, "contents": "x"}, "invalid_body")

    def test_size(self) -> None:
        """1 MiB decoded is accepted; more is 400 secret_too_large (also beyond the body limit)."""
        big = base64.b64encode(b"\0" * MAX_SECRET_SIZE).decode()
        self.assertEqual(len(secret_create(_request({"name": "k", "data": big})).data), MAX_SECRET_SIZE)
        bigger = base64.b64encode(b"\0" * (MAX_SECRET_SIZE + 1)).decode()
        self.refused(secret_create, {"name": "k", "data": bigger}, "secret_too_large")
        self.refused(secret_update, {"data": bigger}, "secret_too_large")
        self.refused(secret_update, {"data": bigger * 2}, "body_too_large")

    def test_update(self) -> None:
        """Only the fields given; null is absent; an empty body changes nothing."""
        self.assertEqual(secret_update(_request(b"")), SecretChange())
        self.assertEqual(secret_update(_request({"uid": None, "gid": 3})), SecretChange(gid=3))
        self.assertEqual(secret_update(_request({"data": ENCODED, "permissions": "0400"})),
                         SecretChange(data=CONTENT, permissions=0o400))
        self.refused(secret_update, {"data": "%%%"}, "invalid_base64")
        self.refused(secret_update, {"name": "other"}, "invalid_body")


class SecretRouteTests(ApiTestCase):
    """The routes, end to end, with the fleet on fakes reading the same store."""

    def setUp(self) -> None:
        # Short enough for the fleet's UNIX socket paths whatever the test's name.
        state_dir = tempfile.mkdtemp(prefix="sec-", dir="/tmp")
        self.addCleanup(shutil.rmtree, state_dir, True)
        self.h = FleetHarness(state_dir)
        self.metrics = Metrics()
        self.store = SecretStore(state_dir, self.h.reactor)
        # The fleet reads this store, as in the daemon (the harness has one in memory).
        self.h.parts = evolve(self.h.parts, secrets=self.store)
        self.h.fleet = fleet_of(self.h.parts)
        self.h.fleet.startService()
        self.addCleanup(self.h.fleet.stopService)
        self.routes = every_route(self.h.fleet, self.h.reactor, self.metrics, self.store)
        self.api = Api(self.h.reactor, self.routes, self.metrics, self.token)
        self.treq = StubTreq(self.api.resource())

    def send(self, method: str, path: str, body: Any = None) -> tuple[int, Any, Any]:
        return self.call(method, path, None if body is None else json.dumps(body).encode(),
                         {"Content-Type": "application/json"})

    def assertQuiet(self, result: tuple[int, Any, Any], status: int, code: str) -> None:
        """An ErrorResponse with ``status`` and ``code`` that quotes no content."""
        self.assertError(result, status, code)
        self.assertNotIn("hunter2", json.dumps(result[1]))

    def test_crud(self) -> None:
        """Create answers 201 without a body; the list shows metadata only; PATCH and DELETE answer 200 without a body."""
        code, body, _ = self.send("POST", "/secrets", {"name": "db", "data": ENCODED, "permissions": "0440",
                                                       "uid": 1000, "gid": 1000})
        self.assertEqual((code, body), (201, b""))
        code, body, _ = self.send("GET", "/secrets")
        self.assertEqual(code, 200)
        self.assertEqual(body, [{"name": "db", "size": len(CONTENT), "permissions": "0440", "uid": 1000, "gid": 1000,
                                 "mod_time": "1970-01-01T00:00:00Z", "modified_at": "1970-01-01T00:00:00Z"}])
        self.h.reactor.advance(10)
        self.assertEqual(self.send("PATCH", "/secrets/db", {"data": base64.b64encode(b"xyz").decode()})[:2], (200, b""))
        [listed] = self.send("GET", "/secrets")[1]
        self.assertEqual((listed["size"], listed["permissions"], listed["mod_time"]), (3, "0440", "1970-01-01T00:00:10Z"))
        self.assertEqual(self.store.get("db").data, b"xyz")
        self.assertEqual(self.send("PATCH", "/secrets/db", {"permissions": "400", "uid": 0})[:2], (200, b""))
        self.assertEqual(self.store.get("db").meta.permissions, 0o400)
        self.assertEqual(self.send("DELETE", "/secrets/db")[:2], (200, b""))
        self.assertEqual(self.send("GET", "/secrets")[1], [])

    def test_error_statuses(self) -> None:
        """409 exists, 404 unknown on PATCH and DELETE, 400 bad name or base64; none quotes the content."""
        self.assertEqual(self.send("POST", "/secrets", {"name": "db", "data": ENCODED})[0], 201)
        self.assertQuiet(self.send("POST", "/secrets", {"name": "db", "data": ENCODED}), 409, "secret_exists")
        self.assertQuiet(self.send("PATCH", "/secrets/nope", {"data": ENCODED}), 404, "secret_not_found")
        self.assertQuiet(self.send("DELETE", "/secrets/nope"), 404, "secret_not_found")
        self.assertQuiet(self.send("POST", "/secrets", {"name": ".hidden", "data": ENCODED}), 400, "invalid_secret_name")
        self.assertQuiet(self.send("POST", "/secrets", {"name": "a/b", "data": ENCODED}), 400, "invalid_secret_name")
        self.assertQuiet(self.send("PATCH", "/secrets/.hidden", {"data": ENCODED}), 400, "invalid_secret_name")
        self.assertQuiet(self.send("DELETE", "/secrets/..x"), 400, "invalid_secret_name")
        self.assertQuiet(self.send("POST", "/secrets", {"name": "b", "data": "hunter2!"}), 400, "invalid_base64")
        self.assertQuiet(self.send("PATCH", "/secrets/db", {"data": "hunter2!"}), 400, "invalid_base64")
        self.assertEqual(self.store.get("db").data, CONTENT)

    def test_store_failure(self) -> None:
        """
        A store that cannot write answers 500 secret_store_failed, or 507
        state_dir_full when the state directory has no room; one that cannot
        read its directory answers 500 too.
        """
        errors = [OSError(28, "No space left on device")]

        def fail(partial: str, final: str) -> None:
            raise errors[0]

        self.patch(durable, "commit", fail)
        self.assertQuiet(self.send("POST", "/secrets", {"name": "db", "data": ENCODED}), 507, "state_dir_full")
        errors[0] = OSError(5, "Input/output error")
        self.assertQuiet(self.send("POST", "/secrets", {"name": "db", "data": ENCODED}), 500, "secret_store_failed")
        self.flushLoggedErrors()
        os.rmdir(self.store.directory)
        self.assertQuiet(self.send("GET", "/secrets"), 500, "secret_store_failed")

    def test_changes_reach_running_nodes(self) -> None:
        """A node made with a stored secret gets it; PATCH and DELETE send the running node its new set."""
        self.store.create(SecretSpec("db", CONTENT, permissions=0o400, uid=5, gid=6))
        d = Deferred.fromCoroutine(self.h.fleet.create("demo", CreateRequest(secrets=("db",)), Wait.AGENT, 60.0))
        self.h.agents[0].ready()
        self.successResultOf(d)
        requests = self.h.agents[0].requests
        self.assertEqual([(h["entries"], body) for h, body in requests], [
            ([{"name": "db", "size": len(CONTENT), "mode": 0o400, "uid": 5, "gid": 6}], CONTENT)])
        self.assertEqual(self.send("PATCH", "/secrets/db", {"data": base64.b64encode(b"new").decode(),
                                                            "permissions": "0440"})[0], 200)
        self.assertEqual(self.send("POST", "/secrets", {"name": "other", "data": ENCODED})[0], 201)
        self.assertEqual(len(requests), 2)
        self.assertEqual((requests[1][0]["entries"][0]["mode"], requests[1][1]), (0o440, b"new"))
        self.assertEqual(self.send("DELETE", "/secrets/db")[0], 200)
        self.assertEqual((requests[2][0]["entries"], requests[2][1]), ([], b""))

    def test_unknown_secret_at_create(self) -> None:
        """A node asking for a secret the store does not hold is a 400 unknown_secret, and nothing is made."""
        self.assertError(self.send("POST", "/hostgroup/demo/nodes", {"secrets": ["nope"]}), 400, "unknown_secret")
        self.assertEqual(self.h.fleet.list(), [])

    def streamed(self, body: bytes, chunk: int = 65536, chunked: bool = False) -> tuple[int, dict[bytes, bytes], bytes, bool]:
        """
        POST /secrets through the daemon's streaming site on an in-memory
        connection, the body in chunks (of the chunked transfer coding when
        ``chunked``, else with a Content-Length): status, headers, body, and
        whether the connection was closed.
        """
        site = StreamingSite(self.api.resource(), self.api.plan_body, reactor=self.h.reactor)
        channel = site.buildProtocol(None)
        transport = StringTransport()
        channel.makeConnection(transport)
        length = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % len(body)
        channel.dataReceived(b"POST /secrets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"%s\r\n\r\n" % length)
        self.h.reactor.advance(0)
        for start in range(0, len(body), chunk):
            if transport.disconnecting:
                break  # as a real transport stops reading once it is closing
            data = body[start:start + chunk]
            channel.dataReceived(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
        if chunked and not transport.disconnecting:
            channel.dataReceived(b"0\r\n\r\n")
        self.h.reactor.advance(0)
        status, headers, content = parse_response(transport.value())
        closing = transport.disconnecting
        if not closing:
            channel.connectionLost(Failure(ConnectionLost()))
        return status, headers, content, closing

    def test_streamed_body(self) -> None:
        """
        Through the daemon's site the body is taken as it arrives (never spooled to a file): a 1 MiB
        secret is stored; a body whose Content-Length is past the limit is refused 413 body_too_large
        before it is read (the connection closed); a chunked one past the limit is read to its end
        without being held, then answered 413 body_too_large; nothing is stored.
        """
        self.assertTrue(self.api.streams_body(b"POST", b"/secrets", Headers()))
        self.assertTrue(self.api.streams_body(b"PATCH", b"/secrets/db", Headers()))
        content = os.urandom(MAX_SECRET_SIZE)
        status, _, _, _ = self.streamed(json.dumps({"name": "big", "data": base64.b64encode(content).decode()}).encode())
        self.assertEqual(status, 201)
        self.assertEqual(self.store.get("big").data, content)
        too_large = json.dumps({"name": "k", "data": "A" * (MAX_SECRET_BODY + 8)}).encode()
        status, _, body, closed = self.streamed(too_large)
        self.assertEqual((status, json.loads(body)["code"], closed), (413, "body_too_large", True))
        status, _, body, _ = self.streamed(too_large * 3, chunk=len(too_large) + 1)
        self.assertEqual((status, json.loads(body)["code"]), (413, "body_too_large"))
        status, _, body, _ = self.streamed(too_large, chunked=True)
        self.assertEqual((status, json.loads(body)["code"]), (413, "body_too_large"))
        self.assertEqual([m.name for m in self.store.list()], ["big"])

    def test_openapi(self) -> None:
        """The document describes the four routes and the Secret model, with no example anywhere."""
        document = openapi_document(self.routes)
        self.assertEqual(set(document["paths"]["/secrets"]), {"get", "post"})
        self.assertEqual(set(document["paths"]["/secrets/{secret}"]), {"patch", "delete"})
        schemas = document["components"]["schemas"]
        self.assertEqual(sorted(schemas["Secret"]["properties"]),
                         ["gid", "mod_time", "modified_at", "name", "permissions", "size", "uid"])
        self.assertEqual(schemas["CreateSecretRequest"]["required"], ["name", "data"])
        self.assertNotIn("example", json.dumps(document))
