# -*- test-case-name: tests.integration.test_shell_client -*-
"""
:meth:`vmservice.client.Client.shell` on the global reactor against the real
shell route served on a UNIX socket and on TCP, with a fake agent whose
shell stream the test drives: the token on the upgrade, frames both ways,
the end of the session, and refusals as :class:`ShellError`.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.fakes import OneNodeFleet
from tests.integration.loopback import serve, until
from vmservice.api.app import Api
from vmservice.api.shell import ShellApi
from vmservice.client import Client, ShellError
from vmservice.metrics import Metrics
from vmservice.wire.shellframes import DATA, EXIT, STARTED, FrameDecoder, encode_frame, encode_json_frame

TOKEN = "shell-test-token"


class ShellClientTests(TestCase):
    """The client's shell session over a UNIX socket (and TCP)."""

    unix = True

    async def setUp(self) -> None:
        self.fleet = OneNodeFleet()
        metrics = Metrics()
        api = Api(reactor, ShellApi(self.fleet, reactor).routes(), metrics, TOKEN)  # type: ignore[arg-type]
        self.url = await serve(self, api.resource(), self.unix)

    def client(self, token: str | None = TOKEN) -> Client:
        client = Client(reactor, self.url, token)  # type: ignore[arg-type]
        self.addCleanup(lambda: Deferred.fromCoroutine(client.close()))
        return client

    async def test_session(self) -> None:
        """Input and resizes reach the guest, output comes back, the shell's exit ends the session with 1000."""
        opening = Deferred.fromCoroutine(self.client().shell("demo-1", uid=1000, cwd="/srv"))
        await until(lambda: self.fleet.agent.streams)
        stream: Any = self.fleet.agent.streams[-1]
        self.assertEqual((stream.header["uid"], stream.header["cwd"]), (1000, "/srv"))
        stream.deliver(encode_json_frame(STARTED, {"pid": 7}))
        session = await opening
        self.addCleanup(session.abort)
        session.resize(100, 30)
        session.write(b"ls\r")
        session.heartbeat()
        await until(lambda: b"ls\r" in bytes(stream.written))
        frames = [(f.kind, f.payload) for f in FrameDecoder().feed(bytes(stream.written))]
        self.assertEqual(frames[-1], (DATA, b"ls\r"))
        self.assertEqual(frames[0][0], 2)
        stream.deliver(encode_frame(DATA, b"file\r\n$ "))
        self.assertEqual(await session.read(), b"file\r\n$ ")
        stream.deliver(encode_json_frame(EXIT, {"exit_code": 0, "signal": None}))
        stream.end()
        self.assertIsNone(await session.read())
        self.assertTrue(session.session_closed)
        self.assertEqual(session.close_code, 1000)

    async def test_refusals(self) -> None:
        """A missing token is 401, a paused node 409, an unknown one 404: ShellError with the status and message."""
        for token, state, host, status in ((None, "running", "demo-1", 401), (TOKEN, "paused", "demo-1", 409),
                                           (TOKEN, "running", "demo-9", 404)):
            self.fleet.state = state
            try:
                await self.client(token).shell(host)
            except ShellError as error:
                self.assertEqual(error.status, status, error.message)
                self.assertTrue(error.message)
            else:
                self.fail("no ShellError")


class TcpShellClientTests(ShellClientTests):
    """The same over TCP."""

    unix = False
