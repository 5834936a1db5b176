"""
Tests of :mod:`vmservice.e2b.data_plane`, the router of a sandbox's data
plane, over methods of the tests' own: unary and streaming calls, their
errors, the access token and the user, deadlines, a client that goes away,
a stream broken at the connection, plain routes, sandboxes not running.
"""

from __future__ import annotations

import json
from base64 import b64encode
from typing import Any, Mapping

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest

from tests.api.connections import parse_response
from tests.e2b.envd_harness import EnvdCase, messages
from vmservice.e2b.connect import Code, ConnectError
from vmservice.e2b.data_plane import EnvdCall, MessageSink, RpcMethod
from vmservice.e2b.envd import envd_methods, envd_routes
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.guest import IGuest

calls: list[EnvdCall] = []
pending: list[Deferred[None]] = []
cancelled: list[EnvdCall] = []


async def echo(call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
    calls.append(call)
    if "fail" in message:
        raise AgentError(GuestErrorKind.NOT_FOUND, "no such file")
    return {"echo": message, "user": call.user.name}


async def count(call: EnvdCall, message: dict[str, Any], sink: MessageSink) -> None:
    calls.append(call)
    for number in range(int(message.get("n", 0))):
        sink.send({"n": number})
    if message.get("wait"):
        pending.append(Deferred())
        try:
            await pending[-1]
        except CancelledError:
            cancelled.append(call)
            raise
    if message.get("break"):
        sink.abort()
    if message.get("fail"):
        raise ConnectError(Code.NOT_FOUND, "gone")


async def plain(call: EnvdCall, request: IRequest) -> None:
    calls.append(call)
    request.setResponseCode(200)
    request.write(b"plain " + str(call.token_ok).encode())
    request.finish()


class RouterTests(EnvdCase):
    methods = {"test.Test/Echo": RpcMethod(unary=echo), "test.Test/Count": RpcMethod(stream=count)}
    plain = {(b"GET", "/files"): plain}

    def make_guest(self) -> IGuest | None:
        return self.guest

    def setUp(self) -> None:
        self.guest: Any = object()
        calls.clear()
        pending.clear()
        cancelled.clear()
        super().setUp()

    def test_unary(self) -> None:
        """A unary call's answer; the call has the sandbox, its guest and the default user."""
        status, body = self.unary("/test.Test/Echo", {"a": 1})
        self.assertEqual((status, body), (200, {"echo": {"a": 1}, "user": "user"}))
        self.assertEqual((calls[0].sandbox.sandbox_id, calls[0].guest, calls[0].token_ok),
                         (self.sandbox_id, self.guest, True))

    def test_unary_error(self) -> None:
        """A guest's error as Connect's, with its status."""
        self.assertEqual(self.unary("/test.Test/Echo", {"fail": 1}),
                         (404, {"code": "not_found", "message": "no such file"}))

    def test_user(self) -> None:
        """The Basic credentials' user; an unknown one is refused."""
        root = {"Authorization": "Basic " + b64encode(b"root:").decode()}
        self.assertEqual(self.unary("/test.Test/Echo", {}, root)[1]["user"], "root")
        nobody = {"Authorization": "Basic " + b64encode(b"nobody:").decode()}
        self.assertEqual(self.unary("/test.Test/Echo", {}, nobody)[0], 401)

    def test_token(self) -> None:
        """Without the sandbox's token an RPC is 401; a plain route is told."""
        status, body = self.unary("/test.Test/Echo", {}, {"X-Access-Token": "wrong"})
        self.assertEqual((status, body["code"]), (401, "unauthenticated"))
        _, transport = self.send("GET", "/files", headers={"X-Access-Token": None})  # type: ignore[dict-item]
        self.assertEqual(parse_response(transport.value())[2], b"plain False")
        _, transport = self.send("GET", "/files")
        self.assertEqual(parse_response(transport.value())[2], b"plain True")

    def test_bad_messages(self) -> None:
        """Not JSON, a unary method called as a stream and the other way: ``invalid_argument``."""
        _, transport = self.send("POST", "/test.Test/Echo", b"[", {"Content-Type": "application/json"})
        self.assertEqual(json.loads(parse_response(transport.value())[2])["code"], "invalid_argument")
        self.assertEqual(self.unary("/test.Test/Count", {})[1]["code"], "invalid_argument")
        _, transport = self.open_stream("/test.Test/Echo", {})
        self.assertEqual(messages(transport)[2]["error"]["code"], "invalid_argument")

    def test_stream(self) -> None:
        """Messages as envelopes, then the end envelope ``{}``; the node is held meanwhile."""
        _, transport = self.open_stream("/test.Test/Count", {"n": 2, "wait": True})
        self.assertEqual(messages(transport), (200, [{"n": 0}, {"n": 1}], None))
        self.assertEqual(self.host.holds[self.sandbox_id], 1)
        pending[0].callback(None)
        self.assertEqual(messages(transport), (200, [{"n": 0}, {"n": 1}], {}))
        self.assertEqual(self.host.holds[self.sandbox_id], 0)

    def test_stream_error(self) -> None:
        """A stream's error is in its end envelope, status 200."""
        _, transport = self.open_stream("/test.Test/Count", {"n": 1, "fail": True})
        self.assertEqual(messages(transport), (200, [{"n": 0}],
                                               {"error": {"code": "not_found", "message": "gone"}}))

    def test_abort(self) -> None:
        """A stream the method breaks ends without an end envelope, its connection aborted."""
        _, transport = self.open_stream("/test.Test/Count", {"n": 1, "break": True})
        self.assertEqual(messages(transport), (200, [{"n": 0}], None))
        self.assertTrue(transport.disconnecting)

    def test_deadline(self) -> None:
        """``Connect-Timeout-Ms`` ends a call that outlives it with ``deadline_exceeded``."""
        _, transport = self.open_stream("/test.Test/Count", {"wait": True}, {"Connect-Timeout-Ms": "1500"})
        self.clock.advance(1.4)
        self.assertEqual(transport.value(), b"")
        self.clock.advance(0.2)
        self.assertEqual(messages(transport)[2]["error"]["code"], "deadline_exceeded")
        self.assertEqual(self.unary("/test.Test/Echo", {}, {"Connect-Timeout-Ms": "soon"})[1]["code"],
                         "invalid_argument")

    def test_client_gone(self) -> None:
        """A client that goes away cancels its call, and the node's hold ends."""
        channel, _ = self.open_stream("/test.Test/Count", {"wait": True})
        channel.connectionLost(Failure(ConnectionLost()))
        self.assertEqual(len(cancelled), 1)
        self.assertEqual(self.host.holds[self.sandbox_id], 0)

    def test_not_running(self) -> None:
        """A call to a paused sandbox: 502, not retried."""
        self.successResultOf(Deferred.fromCoroutine(self.sandboxes.pause(self.sandbox_id)))
        _, transport = self.send("POST", "/test.Test/Echo", b"{}", {"Content-Type": "application/json"})
        status, headers, _ = parse_response(transport.value())
        self.assertEqual((status, headers[b"should-retry"]), (502, b"false"))
        self.assertEqual(calls, [])

    def test_agent_unavailable(self) -> None:
        """A guest whose agent does not answer: ``unavailable``."""
        del self.host.guests[self.sandbox_id]
        self.assertEqual(self.unary("/test.Test/Echo", {})[1]["code"], "unavailable")

    def test_unknown(self) -> None:
        """An unknown method is ``unimplemented``; an unknown plain path is E2B's 404."""
        self.assertEqual(self.unary("/test.Test/Other", {}), (501, {"code": "unimplemented",
                                                                    "message": "test.Test/Other is not served by "
                                                                               "this daemon"}))
        _, transport = self.send("GET", "/other")
        self.assertEqual(parse_response(transport.value())[0], 404)


class ServicesTests(EnvdCase):
    def test_gathered(self) -> None:
        """The daemon's services are gathered in one place."""
        self.assertIsInstance(dict(envd_methods(self.clock, self.sandboxes, self.host)), dict)
        self.assertIsInstance(dict(envd_routes(self.clock, self.sandboxes, self.host)), dict)
