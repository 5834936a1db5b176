# -*- test-case-name: tests.integration.test_client -*-
"""
Tests for :mod:`vmservice.client` on the global reactor: the client against
the real API app served on loopback (TCP and a UNIX socket) by a real
``Site``, with the fleet on fakes; exec, copies and the file system against
a recording server and the real exec route; watches against the real watch
route; :class:`FdBodyProducer` on real pipes.  Its parts without a server are tested in :mod:`tests.test_client`.

The servers (:func:`serve`, :class:`LoopbackApi`, :class:`Recorder`,
:class:`ExecLoopbackCase`) are in :mod:`tests.integration.loopback`, which the
``vmctl`` tests in :mod:`tests.integration.cli` share.
"""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.iweb import UNKNOWN_LENGTH
from twisted.web.server import Site

from tests.integration.loopback import (
    TOKEN,
    ExecLoopbackCase,
    LoopbackApi,
    Recorder,
    WatchLoopbackCase,
    serve,
    state_dir,
    until,
)
from tests.pipes import Pipes
from vmservice.api.app import Api
from vmservice.client import (
    ApiError,
    Client,
    ConnectFailed,
    ExecInterrupted,
    ExecOptions,
    ExecRecord,
    FdBodyProducer,
    WatchInterrupted,
)
from vmservice.wire.payloads import ERROR, EXIT, REJECTED, STARTED, STDERR, STDOUT, encode_json_record, encode_record
from vmservice.metrics import Metrics


class ClientTestCase(TestCase):
    token: str | None = None
    unix = False

    async def setUp(self) -> None:
        self.loop = LoopbackApi(state_dir(self), self.token)
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

    async def test_describe(self) -> None:
        """describe() answers the node's description; an unknown node is an ApiError 404."""
        await self.client.create_node("demo", {"tags": ["a"]})
        description = await self.client.describe("demo-1")
        self.assertEqual((description["hostname"], description["tags"], description["storage"]), ("demo-1", ["a"], "image"))
        self.assertEqual(description["network"]["mode"], "none")
        await self.assertApiError(self.client.describe("demo-9"), 404, "node_not_found")

    async def test_tags(self) -> None:
        """tags() reads; set_tags() adds and removes in one call, replaces, clears; the listing agrees."""
        await self.client.create_node("demo", {"tags": ["a", "b"]})
        self.assertEqual(await self.client.tags("demo-1"), ["a", "b"])
        self.assertEqual(await self.client.set_tags("demo-1", add=["c"], remove=["a"]), ["b", "c"])
        self.assertEqual([n["hostname"] for n in await self.client.nodes(tag="c")], ["demo-1"])
        self.assertEqual(await self.client.set_tags("demo-1", replace=["x", "x"]), ["x"])
        self.assertEqual(await self.client.set_tags("demo-1", replace=[]), [])
        self.assertEqual(await self.client.tags("demo-1"), [])
        await self.assertApiError(self.client.set_tags("demo-1"), 400, "invalid_body")
        await self.assertApiError(self.client.set_tags("demo-1", add=["a"], replace=["b"]), 400, "invalid_body")
        await self.assertApiError(self.client.tags("demo-9"), 404, "node_not_found")

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

    async def test_healthy_paused(self) -> None:
        """healthy() of a paused node is False (409: no agent can answer), not an error."""
        await self.client.create_node("demo")
        self.h.agents[-1].ready()
        await self.client.pause("demo-1")
        self.assertIs(await self.client.healthy("demo-1"), False)
        await self.assertApiError(self.client.health("demo-1"), 409, "paused")

    async def test_healthy_unknown_node(self) -> None:
        """healthy() of an unknown node raises ApiError 404 (a HEAD answer has no body to read a code from)."""
        await self.assertApiError(self.client.healthy("ghost"), 404, None)


class SecretClientTests(ClientTestCase):
    async def test_crud(self) -> None:
        """create_secret, secrets, update_secret and delete_secret round-trip; content is sent as base64."""
        await self.client.create_secret("db", b"\x00hunter2\xff", permissions=0o440, uid=1000, gid=1001)
        self.assertEqual(self.loop.secrets.get("db").data, b"\x00hunter2\xff")
        [listed] = await self.client.secrets()
        self.assertEqual((listed["name"], listed["size"], listed["permissions"], listed["uid"], listed["gid"]),
                         ("db", 9, "0440", 1000, 1001))
        await self.client.update_secret("db", b"new")
        await self.client.update_secret("db", permissions="0400", gid=0)
        secret = self.loop.secrets.get("db")
        self.assertEqual((secret.data, secret.meta.permissions, secret.meta.uid, secret.meta.gid),
                         (b"new", 0o400, 1000, 0))
        await self.client.delete_secret("db")
        self.assertEqual(await self.client.secrets(), [])

    async def test_errors(self) -> None:
        """An existing name is 409, an unknown one 404, a bad name 400, as ApiErrors with their codes."""
        await self.client.create_secret("db", b"x")
        await self.assertApiError(self.client.create_secret("db", b"y"), 409, "secret_exists")
        await self.assertApiError(self.client.update_secret("nope", b"y"), 404, "secret_not_found")
        await self.assertApiError(self.client.delete_secret("nope"), 404, "secret_not_found")
        await self.assertApiError(self.client.create_secret(".x", b"y"), 400, "invalid_secret_name")
        await self.assertApiError(self.client.delete_secret("a b"), 400, "invalid_secret_name")


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


class WireTests(TestCase):
    """What the client puts on the wire and how it reads odd answers, seen by a recording server."""

    async def setUp(self) -> None:
        self.server = Recorder()
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


class LifecycleWireTests(TestCase):
    """The lifecycle calls (pause ... shutdown) on the wire, against a recording server."""

    async def setUp(self) -> None:
        self.server = Recorder()
        self.server.body, self.server.content_type = b"done\n", b"text/plain; charset=utf-8"
        self.url = await serve(self, self.server)
        self.client = Client(reactor, self.url, "tok")
        self.addCleanup(lambda: Deferred.fromCoroutine(self.client.close()))

    def requests(self) -> list[tuple[bytes, bytes]]:
        return [(method, uri) for method, uri, _ in self.server.seen]

    async def test_text_calls(self) -> None:
        """pause, resume, suspend, restore and shutdown POST to their route and answer the text reply."""
        self.assertEqual(await self.client.pause("demo-1"), "done\n")
        self.assertEqual(await self.client.resume("demo-1"), "done\n")
        self.assertEqual(await self.client.suspend("demo-1"), "done\n")
        self.assertEqual(await self.client.restore("demo-1"), "done\n")
        self.assertEqual(await self.client.restore("demo-1", wait="agent", timeout="90s"), "done\n")
        self.assertEqual(await self.client.shutdown("demo-1"), "done\n")
        self.assertEqual(await self.client.shutdown("demo-1", "reboot"), "done\n")
        self.assertEqual(
            self.requests(),
            [
                (b"POST", b"/vm/demo-1/pause"),
                (b"POST", b"/vm/demo-1/resume"),
                (b"POST", b"/vm/demo-1/suspend"),
                (b"POST", b"/vm/demo-1/restore"),
                (b"POST", b"/vm/demo-1/restore?wait=agent&timeout=90s"),
                (b"POST", b"/vm/demo-1/shutdown?action=shutdown"),
                (b"POST", b"/vm/demo-1/shutdown?action=reboot"),
            ],
        )
        self.assertEqual(self.server.bodies, [b""] * 7)
        for _, _, headers in self.server.seen:
            self.assertEqual(headers.getRawHeaders(b"authorization"), [b"Bearer tok"])
            self.assertEqual(headers.getRawHeaders(b"accept"), [b"text/plain, application/json"])

    async def test_text_reply_not_utf8(self) -> None:
        """A text reply is decoded as UTF-8, invalid bytes replaced rather than failing."""
        self.server.body = b"ok \xff"
        self.assertEqual(await self.client.pause("a b"), "ok \ufffd")
        self.assertEqual(self.requests(), [(b"POST", b"/vm/a%20b/pause")])

    async def test_relaunch(self) -> None:
        """relaunch sends wait and timeout and answers the CreateNodeResponse decoded."""
        node = {"hostname": "demo-1", "hostgroup": "demo", "ip": "10.0.0.2", "created_at": "2026-11-22T11:40:02Z",
                "arch": "x86_64"}
        self.server.body, self.server.content_type = json.dumps(node).encode(), b"application/json"
        self.assertEqual(await self.client.relaunch("demo-1"), node)
        self.assertEqual(await self.client.relaunch("demo-1", wait="agent", timeout="2m"), node)
        self.assertEqual(
            self.requests(),
            [(b"POST", b"/vm/demo-1/relaunch"), (b"POST", b"/vm/demo-1/relaunch?wait=agent&timeout=2m")],
        )
        self.server.body = b"relaunched"
        try:
            await self.client.relaunch("demo-1")
        except ApiError as error:
            self.assertEqual((error.status, error.code), (200, "invalid_response"))
        else:
            self.fail("no ApiError")

    async def test_errors(self) -> None:
        """An ErrorResponse raises ApiError for text and JSON calls alike."""
        self.server.status, self.server.content_type = 409, b"application/json"
        self.server.body = b'{"error":"node demo-1 is paused","code":"paused"}'
        for call in (
            self.client.pause("demo-1"),
            self.client.resume("demo-1"),
            self.client.suspend("demo-1"),
            self.client.restore("demo-1", wait="agent"),
            self.client.relaunch("demo-1"),
            self.client.shutdown("demo-1", "reboot"),
        ):
            try:
                await call
            except ApiError as error:
                self.assertEqual((error.status, error.code, error.message), (409, "paused", "node demo-1 is paused"))
            else:
                self.fail("no ApiError")


# -- exec, copies and the file system ------------------------------------


class ExecClientTests(ExecLoopbackCase):
    """:meth:`Client.exec` and :meth:`Client.exec_buffered` against :class:`ExecLoopbackCase`."""

    async def test_records_as_they_arrive(self) -> None:
        """Each record reaches the callback as it arrives, payloads as exact bytes; the last one is answered."""
        pending = self.run_exec("ls", ["-l", "a b"], ExecOptions(env={"A": "1"}, uid=7, gid=8, cwd="/tmp", shell="", permissions=0o27))
        stream = await self.stream()
        self.assertEqual(
            {k: stream.header[k] for k in ("cmd", "args", "env", "uid", "gid", "cwd", "shell", "umask", "stdin")},
            {"cmd": "ls", "args": ["-l", "a b"], "env": ["A=1"], "uid": 7, "gid": 8, "cwd": "/tmp", "shell": "",
             "umask": 0o27, "stdin": False},
        )
        stream.deliver(encode_json_record(STARTED, {"pid": 9}), encode_record(STDOUT, b"\xff\x00"))
        await until(lambda: len(self.records) == 2)
        self.assertNoResult(pending)
        self.assertEqual((self.records[0].type, self.records[0].pid), ("started", 9))
        self.assertEqual((self.records[1].type, self.records[1].data), ("stdout", b"\xff\x00"))
        stream.deliver(encode_record(STDERR, b"e"), encode_json_record(EXIT, {"exit_code": 3, "signal": None}))
        last = await pending
        self.assertEqual((last.type, last.exit_code, last.signal, last.final), ("exit", 3, None, True))
        self.assertEqual([r.type for r in self.records], ["started", "stdout", "stderr", "exit"])
        self.assertEqual(self.records[2].data, b"e")

    async def test_stdin_full_duplex(self) -> None:
        """stdin from a pipe streams into the process while its output already comes back; EOF half-closes."""
        read_end, write_end = self.pipe()
        source = os.fdopen(read_end, "rb", closefd=False)
        pending = self.run_exec("cat", stdin=source)
        stream = await self.stream()
        self.assertTrue(stream.header["stdin"])
        os.write(write_end, b"first ")
        await until(lambda: bytes(stream.written) == b"first ")
        stream.deliver(encode_json_record(STARTED, {"pid": 1}), encode_record(STDOUT, b"echo"))
        await until(lambda: len(self.records) == 2)
        self.assertEqual(self.records[1].data, b"echo")
        os.write(write_end, b"second")
        self.close(write_end)
        await until(lambda: stream.half_closed)
        self.assertEqual(bytes(stream.written), b"first second")
        stream.deliver(encode_json_record(EXIT, {"exit_code": 0, "signal": None}))
        self.assertEqual((await pending).exit_code, 0)

    async def test_stdin_bytes(self) -> None:
        """stdin given as bytes is sent whole, then EOF."""
        pending = self.run_exec("cat", stdin=b"x" * 100_000)
        stream = await self.stream()
        await until(lambda: stream.half_closed)
        self.assertEqual(bytes(stream.written), b"x" * 100_000)
        stream.deliver(encode_json_record(STARTED, {"pid": 1}), encode_json_record(EXIT, {"exit_code": 0, "signal": None}))
        await pending

    async def test_error_record_and_signal(self) -> None:
        """A command that cannot start answers its error record; a signal is reported with 128+N."""
        pending = self.run_exec("nope")
        (await self.stream()).deliver(encode_json_record(ERROR, {"message": "nope: not found", "exit_code": 127}))
        last = await pending
        self.assertEqual((last.type, last.exit_code, last.error), ("error", 127, "nope: not found"))
        pending = self.run_exec("sleep 9")
        stream = await self.stream(2)
        stream.deliver(encode_json_record(STARTED, {"pid": 2}), encode_json_record(EXIT, {"exit_code": 137, "signal": "SIGKILL"}))
        last = await pending
        self.assertEqual((last.exit_code, last.signal), (137, "SIGKILL"))

    async def test_errors_before_stream(self) -> None:
        """An unknown node is ApiError 404, an agent that is down 503, a rejected cwd 400."""
        for host, status in (("demo-9", 404),):
            with self.assertRaises(ApiError) as raised:
                await self.client.exec(host, "true", on_record=self.records.append)
            self.assertEqual(raised.exception.status, status)
        self.fleet.state = "down"
        with self.assertRaises(ApiError) as raised:
            await self.client.exec("demo-1", "true", on_record=self.records.append)
        self.assertEqual(raised.exception.status, 503)
        self.fleet.state = "running"
        pending = self.run_exec("true", options=ExecOptions(cwd="/nope"))
        (await self.stream()).deliver(encode_json_record(REJECTED, {"message": "no /nope"}))
        try:
            await pending
        except ApiError as error:
            self.assertEqual(error.status, 400)
        else:
            self.fail("no ApiError")

    async def test_callback_error_ends_request(self) -> None:
        """An exception from on_record is raised by exec and the guest stream is torn down."""

        def broken(record: ExecRecord) -> None:
            raise BrokenPipeError("stdout closed")

        pending = self.run_exec("yes", on_record=broken)
        stream = await self.stream()
        stream.deliver(encode_json_record(STARTED, {"pid": 1}))
        with self.assertRaises(BrokenPipeError):
            await pending
        await until(lambda: stream.ended)

    async def test_buffered(self) -> None:
        """exec_buffered answers an ExecResult with bytes decoded from base64."""
        pending = Deferred.fromCoroutine(self.client.exec_buffered("demo-1", "x"))
        stream = await self.stream()
        stream.deliver(encode_json_record(STARTED, {"pid": 4}), encode_record(STDOUT, b"\xfe"),
                       encode_record(STDERR, b"err"), encode_json_record(EXIT, {"exit_code": 2, "signal": None}))
        result = await pending
        self.assertEqual((result.stdout, result.stderr, result.exit_code, result.pid), (b"\xfe", b"err", 2, 4))


class StreamWireTests(Pipes, TestCase):
    """exec, cp and fs requests as a recording server sees them, and odd exec streams."""

    async def setUp(self) -> None:
        self.server = Recorder()
        self.url = await serve(self, self.server)
        self.client = Client(reactor, self.url)

        async def close() -> None:
            await deferLater(reactor, 0.01, lambda: None)  # a connection still on its way back to the pool
            await self.client.close()

        self.addCleanup(lambda: Deferred.fromCoroutine(close()))

    def seen(self) -> list[tuple[bytes, bytes]]:
        return [(method, uri) for method, uri, _ in self.server.seen]

    async def test_exec_query(self) -> None:
        """exec sends cmd, repeated args and env, numbers, booleans as true/false and stdio=base64 by default."""
        self.server.body = b'{"type":"exit","exit_code":0}\n'
        await self.client.exec("h", "c", ["a", "b"], ExecOptions(env=["X=1"], uid=0, stdout=False), on_record=lambda r: None)
        self.assertEqual(self.seen(), [(b"POST", b"/vm/h/exec?cmd=c&args=a&args=b&env=X%3D1&uid=0&stdout=false&stdio=base64")])
        self.assertEqual(self.server.seen[0][2].getRawHeaders(b"accept"), [b"application/x-ndjson"])

    async def test_exec_interrupted(self) -> None:
        """A stream without its last record, or with a line that is not JSON, raises ExecInterrupted."""
        for body in (b'{"type":"started","pid":1}\n', b'{"type":"started"}\nnot json\n', b"[1]\n"):
            self.server.body = body
            with self.assertRaises(ExecInterrupted):
                await self.client.exec("h", "c", on_record=lambda r: None)

    async def test_exec_last_line_without_newline(self) -> None:
        """A last record without its newline still counts."""
        self.server.body = b'{"type":"started","pid":1}\n{"type":"exit","exit_code":5}'
        self.assertEqual((await self.client.exec("h", "c", on_record=lambda r: None)).exit_code, 5)

    async def test_upload(self) -> None:
        """upload sends path, mode, owner and octal permissions with the body and its content type."""
        self.server.body = b""
        await self.client.upload("h", "/x y", b"data", uid=1, gid=2, permissions=0o640)
        await self.client.upload("h", "/d", b"tar", mode="tar")
        self.assertEqual(self.seen(), [
            (b"POST", b"/vm/h/cp?path=%2Fx+y&mode=binary&uid=1&gid=2&permissions=0640"),
            (b"POST", b"/vm/h/cp?path=%2Fd&mode=tar"),
        ])
        types = [headers.getRawHeaders(b"content-type") for _, _, headers in self.server.seen]
        self.assertEqual(types, [[b"application/octet-stream"], [b"application/x-tar"]])
        self.assertEqual(self.server.bodies, [b"data", b"tar"])

    async def test_upload_from_pipe_is_chunked(self) -> None:
        """A pipe is sent chunked as it is read; a regular file with its length."""
        read_end, write_end = self.pipe()
        os.write(write_end, b"piped")
        self.close(write_end)
        await self.client.upload("h", "/p", os.fdopen(read_end, "rb", closefd=False))
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"file!")
        with open(path, "rb") as f:
            await self.client.upload("h", "/f", f)
        self.assertEqual(self.server.bodies, [b"piped", b"file!"])
        headers = [h for _, _, h in self.server.seen]
        self.assertEqual(headers[0].getRawHeaders(b"transfer-encoding"), [b"chunked"])
        self.assertEqual(headers[1].getRawHeaders(b"content-length"), [b"5"])

    async def test_download(self) -> None:
        """download hands the body to write and answers the file mode; Accept follows the mode."""
        self.server.body, self.server.content_type = b"x" * 70_000, b"application/octet-stream"
        self.server.extra = {b"X-Service-File-Mode": b"0750"}
        chunks: list[bytes] = []
        result = await self.client.download("h", "/f", write=chunks.append)
        self.assertEqual((b"".join(chunks), result.mode, result.content_type), (b"x" * 70_000, 0o750, "application/octet-stream"))
        await self.client.download("h", "/d", write=chunks.append, mode="tar")
        self.assertEqual(self.seen(), [(b"GET", b"/vm/h/cp?path=%2Ff&mode=binary"), (b"GET", b"/vm/h/cp?path=%2Fd&mode=tar")])
        accepts = [h.getRawHeaders(b"accept") for _, _, h in self.server.seen]
        self.assertEqual(accepts, [[b"application/octet-stream"], [b"application/x-tar"]])

    async def test_download_error(self) -> None:
        """A missing path is an ApiError and nothing is written."""
        self.server.status, self.server.body = 404, b'{"error":"no","code":"not_found"}'
        chunks: list[bytes] = []
        with self.assertRaises(ApiError) as raised:
            await self.client.download("h", "/f", write=chunks.append)
        self.assertEqual((raised.exception.status, chunks), (404, []))

    async def test_fs(self) -> None:
        """readdir, stat, mkdir and remove use their routes; mkdir sends a JSON body with octal text."""
        self.server.body = b"[]"
        await self.client.readdir("h", "/a")
        self.server.body = b"{}"
        await self.client.stat("h", "~")
        await self.client.mkdir("h", "/m", recursive=True, mode=0o700)
        await self.client.mkdir("h", "/n")
        await self.client.remove("h", "/r", recursive=True)
        await self.client.remove("h", "/s")
        self.assertEqual(self.seen(), [
            (b"GET", b"/vm/h/fs/readdir?path=%2Fa"), (b"GET", b"/vm/h/fs/stat?path=~"),
            (b"POST", b"/vm/h/fs/mkdir"), (b"POST", b"/vm/h/fs/mkdir"),
            (b"DELETE", b"/vm/h/fs/remove?path=%2Fr&recursive=true"), (b"DELETE", b"/vm/h/fs/remove?path=%2Fs"),
        ])
        self.assertEqual([json.loads(b) for b in self.server.bodies[2:4]],
                         [{"path": "/m", "recursive": True, "mode": "0700"}, {"path": "/n"}])


class FdBodyProducerTests(Pipes, TestCase):
    """:class:`FdBodyProducer` on real pipes and the real reactor."""

    async def test_streams_pauses_and_ends(self) -> None:
        """Data is passed on as it arrives, not while paused; EOF fires the Deferred and restores the flags."""
        import fcntl

        read_end, write_end = self.pipe()
        flags = fcntl.fcntl(read_end, fcntl.F_GETFL)
        producer = FdBodyProducer(reactor, read_end)
        consumer = StringTransport()
        done = producer.startProducing(consumer)
        os.write(write_end, b"one")
        await until(lambda: consumer.value() == b"one")
        producer.pauseProducing()
        os.write(write_end, b"two")
        await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(consumer.value(), b"one")
        producer.resumeProducing()
        await until(lambda: consumer.value() == b"onetwo")
        self.close(write_end)
        await done
        self.assertEqual(fcntl.fcntl(read_end, fcntl.F_GETFL), flags)
        self.assertEqual(producer.length, UNKNOWN_LENGTH)

    async def test_abort_and_stop(self) -> None:
        """abort fails the body; after stopProducing nothing more is read and the Deferred never fires."""
        read_end, _ = self.pipe()
        producer = FdBodyProducer(reactor, read_end)
        done = producer.startProducing(StringTransport())
        producer.abort(Failure(OSError("writer failed")))
        with self.assertRaises(OSError):
            await done
        read2, write2 = self.pipe()
        stopped = FdBodyProducer(reactor, read2)
        consumer = StringTransport()
        later = stopped.startProducing(consumer)
        stopped.stopProducing()
        os.write(write2, b"late")
        self.close(write2)
        await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(consumer.value(), b"")
        self.assertNoResult(later)



# -- watches ---------------------------------------------------------------


class WatchClientTests(WatchLoopbackCase):
    """:meth:`Client.watch` against :class:`WatchLoopbackCase`."""

    async def test_events_as_they_arrive(self) -> None:
        """Each event comes out of the iterator as it arrives; the loop ends when the daemon closes the stream."""
        done = self.consume("/srv", "~/x", patterns=["*.py"], events=["create", "write"], recursive=True,
                            debounce="100ms", uid=1000)
        stream = await self.stream()
        self.assertEqual(stream.header, {"op": "watch", "paths": ["/srv", "~/x"], "patterns": ["*.py"],
                                         "events": ["create", "write"], "recursive": True, "debounce": 0.1,
                                         "uid": 1000})
        stream.deliver(self.message(ok=True, result={"paths": ["/srv"], "watches": 1}), self.event("create", "/srv/a"))
        await until(lambda: len(self.events) == 1)
        self.assertNoResult(done)
        stream.deliver(self.event("write", "/srv/a"))
        stream.end()
        await done
        self.assertEqual([(e["id"], e["type"], e["path"]) for e in self.events],
                         [(1, "create", "/srv/a"), (2, "write", "/srv/a")])
        self.assertEqual(set(self.events[0]), {"id", "type", "path", "timestamp", "size", "isDir"})

    async def test_limits_and_last_event_id(self) -> None:
        """one_shot, max_events and timeout are sent; ids continue after last_event_id."""
        done = self.consume("/srv", one_shot=True, max_events=5, timeout="1m", last_event_id=10)
        stream = await self.stream()
        stream.deliver(self.message(ok=True, result={}), self.event("create", "/srv/a"), self.event("create", "/srv/b"))
        await done
        self.assertEqual([e["id"] for e in self.events], [11])
        self.assertEqual(stream.aborted[0], 0)

    async def test_errors_before_the_stream(self) -> None:
        """A missing path (the guest's refusal) and a paused node are ApiErrors from the first iteration."""
        done = self.consume("/nope")
        stream = await self.stream()
        stream.deliver(self.message(ok=False, error="not_found", message="/nope: No such file or directory"))
        with self.assertRaises(ApiError) as caught:
            await done
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "not_found"))
        self.fleet.state = "paused"
        with self.assertRaises(ApiError) as caught:
            await self.consume("/srv")
        self.assertEqual(caught.exception.status, 409)

    async def test_leaving_the_loop_removes_the_watch(self) -> None:
        """Breaking out of the loop closes the connection; the daemon resets the guest's stream."""
        done = self.consume("/srv", stop_after=1)
        stream = await self.stream()
        stream.deliver(self.message(ok=True, result={}), self.event("create", "/srv/a"), self.event("write", "/srv/a"))
        await done
        await until(lambda: stream.aborted is not None)
        self.assertEqual(len(self.events), 1)

    async def test_interrupted(self) -> None:
        """A connection lost mid-stream raises WatchInterrupted."""
        done = self.consume("/srv")
        stream = await self.stream()
        stream.deliver(self.message(ok=True, result={}), self.event("create", "/srv/a"))
        await until(lambda: len(self.events) == 1)
        for factory in self.served:  # type: ignore[attr-defined]
            for protocol in list(factory.protocols):
                protocol.transport.abortConnection()
        with self.assertRaises(WatchInterrupted):
            await done


# -- lifecycle events ------------------------------------------------------


class EventsClientTests(TestCase):
    """:meth:`Client.events` against the real ``/events`` route on loopback, with a real event hub."""

    async def setUp(self) -> None:
        from datetime import datetime, timezone

        from vmservice.api.events import EventsApi
        from vmservice.nodes.events import EventHub
        from vmservice.nodes.model import NodeRecord, Status

        clock = MemoryReactorClock()
        clock.advance(1_700_000_000)
        self.hub = EventHub(clock.seconds, size=3)

        class Fleet:
            events = self.hub

            def group(self, name: str) -> None:
                if name != "demo":
                    from vmservice.errors import NotFound

                    raise NotFound(f"host group {name!r} not found", code="hostgroup_not_found")

        self.record = NodeRecord(hostname="demo-1", hostgroup="demo", ram_bytes=1, cpus=1,
                                 created_at=datetime(2024, 1, 1, tzinfo=timezone.utc), status=Status.RUNNING,
                                 tags=("t",))
        api = Api(clock, EventsApi(Fleet(), clock).routes(), Metrics(), None)  # type: ignore[arg-type]
        self.url = await serve(self, api.resource())
        self.client = Client(reactor, self.url)
        self.addCleanup(lambda: Deferred.fromCoroutine(self.client.close()))

    def publish(self, kind: str) -> None:
        from vmservice.nodes.events import EventType

        self.hub.publish(EventType(kind), self.record)

    async def test_follow_and_replay(self) -> None:
        """Following gets new events as they happen; leaving the loop unsubscribes; last_event_id replays after it."""
        got: list[dict[str, Any]] = []

        async def follow() -> None:
            async for event in self.client.events(hostgroup="demo", tag="t"):
                got.append(event)
                if len(got) == 2:
                    break

        done = Deferred.fromCoroutine(follow())
        await until(lambda: self.hub.subscribers == 1)
        self.publish("paused")
        self.publish("resumed")
        await done
        self.assertEqual([(e["id"], e["type"], e["status"], e["tags"]) for e in got],
                         [(1, "paused", "Running", ["t"]), (2, "resumed", "Running", ["t"])])
        await until(lambda: self.hub.subscribers == 0)
        self.publish("rebooted")
        self.publish("stopped")
        replayed = [e async for e in self.client.events(last_event_id=2, follow=False)]
        self.assertEqual([e["type"] for e in replayed], ["rebooted", "stopped"])
        held = [e async for e in self.client.events(last_event_id=0, follow=False)]
        self.assertEqual([e["type"] for e in held], ["gap", "resumed", "rebooted", "stopped"])
        self.assertEqual((held[0]["last_event_id"], held[0]["oldest_id"]), (0, 2))

    async def test_unknown_group(self) -> None:
        """An unknown host group is an ApiError (404) from the first iteration."""
        with self.assertRaises(ApiError) as caught:
            async for _ in self.client.events(hostgroup="nope"):
                pass
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "hostgroup_not_found"))
