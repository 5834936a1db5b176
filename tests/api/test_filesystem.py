# -*- test-case-name: tests.api.test_filesystem -*-
"""
Tests for :mod:`vmservice.api.filesystem`: the fs routes through a real Site and
Agent over in-memory connections (treq's StubTreq), the fleet on fakes and an agent
that answers fs streams from a script.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st
from treq.testing import StubTreq
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeAgent, FleetHarness
from vmservice.agent.errors import AgentUnavailable
from vmservice.api.query import FILE_MODE
from vmservice.api.app import Api
from vmservice.api.filesystem import FilesystemApi, rfc3339_ns
from vmservice.api.openapi import openapi_document
from vmservice.errors import BadRequest
from vmservice.metrics import Metrics
from vmservice.nodes.readiness import AGENT_WAIT
from vmservice.nodes.model import Status, Wait

ENTRY = {"name": "hosts", "type": "file", "size": 12, "mtime_ns": 1_700_000_000_500_000_000, "mode": 0o644}
RENDERED = {"name": "hosts", "type": "file", "size": 12, "mtime": "2023-11-14T22:13:20.5Z", "mode": "0644"}


class FsAgent(FakeAgent):
    """
    A fake agent whose file-system operations (the real ones) get requests
    answered with :attr:`reply`, and recorded.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.requests: list[dict[str, Any]] = []
        self.reply: Any = {"ok": True, "result": ENTRY}

    async def request(self, header: Mapping[str, Any], limit: int) -> bytes:
        if not self.is_ready:
            raise AgentUnavailable("not connected")
        self.requests.append(dict(header))
        return json.dumps(self.reply).encode()


class FsHarness(FleetHarness):
    def _agent(self, path: str, transport: str = "virtio-serial") -> FsAgent:
        agent = FsAgent(path)
        self.agents.append(agent)
        return agent


class FilesystemApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.h = FsHarness(self.mktemp())
        self.h.fleet.startService()
        self.addCleanup(self.h.fleet.stopService)
        self.api = Api(self.h.reactor, FilesystemApi(self.h.fleet).routes(), Metrics(), None)
        self.treq = StubTreq(self.api.resource())
        self.successResultOf(self.h.fleet.create("demo", _request(), Wait.NONE, 60))
        self.agent: FsAgent = self.h.agents[0]  # type: ignore[assignment]
        self.agent.ready()

    def call(self, method: str, path: str, body: bytes | None = None, waited: float = 0.0) -> tuple[int, Any]:
        """The answer to a request, ``waited`` seconds of the clock after it was asked."""
        d = self.treq.request(method, "http://x" + path, data=body)
        self.treq.flush()
        if waited:
            self.assertNoResult(d)
            self.h.reactor.advance(waited)
            self.treq.flush()
        response = self.successResultOf(d)
        content = self.successResultOf(response.content())
        self.assertEqual(response.headers.getRawHeaders("content-type"), ["application/json"])
        return response.code, json.loads(content)

    def assertError(self, result: tuple[int, Any], status: int, code: str) -> None:
        self.assertEqual(result[0], status, result[1])
        self.assertEqual(result[1]["code"], code, result[1])
        self.assertIsInstance(result[1]["error"], str)

    def test_readdir(self) -> None:
        """GET readdir answers a JSON array of FsEntry with RFC 3339 mtime and octal mode."""
        self.agent.reply = {"ok": True, "result": [ENTRY, {**ENTRY, "name": "x", "type": "directory", "mode": 0o1777}]}
        code, body = self.call("GET", "/vm/demo-1/fs/readdir?path=/etc")
        self.assertEqual(code, 200)
        self.assertEqual(body, [RENDERED, {**RENDERED, "name": "x", "type": "directory", "mode": "1777"}])
        self.assertEqual(self.agent.requests, [{"op": "fs", "action": "readdir", "path": "/etc"}])

    def test_listing_budget(self) -> None:
        """
        A listing's answer is held in the buffer budget while it is written:
        one larger than the room left is 503 buffer_budget_exhausted; one that
        fits is answered and gives its share back.
        """
        from vmservice.buffer_budget import BufferBudget

        budget = BufferBudget(300)
        api = Api(self.h.reactor, FilesystemApi(self.h.fleet, budget).routes(), Metrics(), None)
        self.treq = StubTreq(api.resource())
        self.agent.reply = {"ok": True, "result": [ENTRY] * 2}
        self.assertEqual(self.call("GET", "/vm/demo-1/fs/readdir?path=/etc"), (200, [RENDERED] * 2))
        self.assertEqual(budget.held, 0)
        self.agent.reply = {"ok": True, "result": [ENTRY] * 5}
        self.assertError(self.call("GET", "/vm/demo-1/fs/readdir?path=/etc"), 503, "buffer_budget_exhausted")
        self.assertEqual((budget.held, budget.refusals), (0, 1))

    def test_stat(self) -> None:
        """GET stat answers one FsEntry; ``~/...`` paths go to the guest as they are."""
        code, body = self.call("GET", "/vm/demo-1/fs/stat?path=~/.profile")
        self.assertEqual((code, body), (200, RENDERED))
        self.assertEqual(self.agent.requests, [{"op": "fs", "action": "stat", "path": "~/.profile"}])

    def test_mkdir(self) -> None:
        """POST mkdir takes a JSON body; mode is octal text, default 0755, recursive default false."""
        code, body = self.call("POST", "/vm/demo-1/fs/mkdir", b'{"path": "/srv/a", "recursive": true, "mode": "0700"}')
        self.assertEqual((code, body), (200, RENDERED))
        self.call("POST", "/vm/demo-1/fs/mkdir", b'{"path": "/srv/b", "mode": ""}')
        self.assertEqual(
            self.agent.requests,
            [
                {"op": "fs", "action": "mkdir", "path": "/srv/a", "recursive": True, "mode": 0o700},
                {"op": "fs", "action": "mkdir", "path": "/srv/b", "recursive": False, "mode": 0o755},
            ],
        )

    def test_remove(self) -> None:
        """DELETE remove passes recursive as a boolean and answers the removed entry."""
        code, body = self.call("DELETE", "/vm/demo-1/fs/remove?path=/srv/a&recursive=true")
        self.assertEqual((code, body), (200, RENDERED))
        self.call("DELETE", "/vm/demo-1/fs/remove?path=/srv/b")
        self.assertEqual(
            [r["recursive"] for r in self.agent.requests], [True, False]
        )

    def test_bad_input(self) -> None:
        """Missing or relative paths, bad booleans, bad modes and bad bodies are 400s, before the guest is asked."""
        self.assertError(self.call("GET", "/vm/demo-1/fs/readdir"), 400, "invalid_path")
        self.assertError(self.call("GET", "/vm/demo-1/fs/stat?path=etc/hosts"), 400, "invalid_path")
        self.assertError(self.call("GET", "/vm/demo-1/fs/stat?path=~bob/x"), 400, "invalid_path")
        self.assertError(self.call("DELETE", "/vm/demo-1/fs/remove?path=/x&recursive=maybe"), 400, "invalid_query")
        self.assertError(self.call("POST", "/vm/demo-1/fs/mkdir", b'{"path": "/x", "mode": "0999"}'), 400, "invalid_mode")
        self.assertError(self.call("POST", "/vm/demo-1/fs/mkdir", b'{"path": "/x", "mode": 493}'), 400, "invalid_body")
        self.assertError(self.call("POST", "/vm/demo-1/fs/mkdir", b'{"path": "/x", "recursive": "yes"}'), 400, "invalid_body")
        self.assertError(self.call("POST", "/vm/demo-1/fs/mkdir", b'{"recursive": true}'), 400, "invalid_body")
        self.assertError(self.call("POST", "/vm/demo-1/fs/mkdir", b""), 400, "invalid_body")
        self.assertError(self.call("POST", "/vm/demo-1/fs/mkdir", b'{"path": "x"}'), 400, "invalid_path")
        self.assertEqual(self.agent.requests, [])

    def test_guest_errors(self) -> None:
        """The guest's error kinds become 404, 400, 409 and 403 with their codes."""
        for kind, status, code in (
            ("not_found", 404, "not_found"),
            ("not_a_directory", 400, "not_a_directory"),
            ("not_empty", 409, "directory_not_empty"),
            ("exists", 409, "already_exists"),
            ("permission_denied", 403, "permission_denied"),
            ("invalid", 400, "invalid_path"),
        ):
            self.agent.reply = {"ok": False, "error": kind, "message": "/x: nope"}
            result = self.call("GET", "/vm/demo-1/fs/stat?path=/x")
            self.assertError(result, status, code)
            self.assertEqual(result[1]["error"], "/x: nope")

    def test_unknown_vm(self) -> None:
        """An unknown VM is 404 node_not_found."""
        self.assertError(self.call("GET", "/vm/demo-9/fs/stat?path=/"), 404, "node_not_found")

    def test_agent_not_connected(self) -> None:
        """A node whose agent does not connect within AGENT_WAIT seconds answers 503."""
        self.agent.is_ready = False
        self.assertError(self.call("GET", "/vm/demo-1/fs/readdir?path=/", waited=AGENT_WAIT), 503, "agent_unavailable")

    def test_agent_connects(self) -> None:
        """A request for a node whose agent connects within AGENT_WAIT seconds is served once it does."""
        self.agent.is_ready = False
        d = self.treq.request("GET", "http://x/vm/demo-1/fs/stat?path=/")
        self.treq.flush()
        self.h.reactor.advance(AGENT_WAIT - 1)
        self.assertNoResult(d)
        self.agent.ready()
        self.treq.flush()
        self.assertEqual(self.successResultOf(d).code, 200)

    def test_paused(self) -> None:
        """A paused node answers 409, as the contract says for fs while paused."""
        node = self.h.node("demo-1")
        node.record = evolve(node.record, status=Status.PAUSED)
        self.assertError(self.call("GET", "/vm/demo-1/fs/stat?path=/"), 409, "paused")

    def test_openapi(self) -> None:
        """The routes are in the OpenAPI document, with FsEntry as a schema."""
        document = openapi_document(FilesystemApi(self.h.fleet).routes())
        self.assertIn("/vm/{hostname}/fs/readdir", document["paths"])
        self.assertIn("delete", document["paths"]["/vm/{hostname}/fs/remove"])
        self.assertIn("FsEntry", json.dumps(document))


def _request() -> Any:
    from vmservice.nodes.fleet import CreateRequest

    return CreateRequest()


class FormatTests(SynchronousTestCase):
    @given(st.integers(0, 253_402_300_799 * 10**9 + 999_999_999))
    def test_rfc3339_ns(self, nanoseconds: int) -> None:
        """mtime text is RFC 3339 UTC that Python parses back to the same instant to the microsecond."""
        from datetime import datetime, timezone

        text = rfc3339_ns(nanoseconds)
        self.assertRegex(text, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
        head, _, rest = text.rstrip("Z").partition(".")
        parsed = datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
        seconds = int((parsed - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds())
        self.assertEqual(seconds * 10**9 + int((rest or "0").ljust(9, "0")), nanoseconds)

    def test_rfc3339_extremes(self) -> None:
        """Times before the epoch work; times beyond year 9999 are clamped, not an error."""
        self.assertEqual(rfc3339_ns(-1), "1969-12-31T23:59:59.999999999Z")
        self.assertEqual(rfc3339_ns(10**30), "9999-12-31T23:59:59Z")

    @given(st.integers(0, 0o7777), st.sampled_from(["", "0", "0o"]))
    def test_octal_mode(self, bits: int, prefix: str) -> None:
        """Octal mode text parses to its bits with or without a leading 0 or 0o."""
        self.assertEqual(FILE_MODE.parse("mode", prefix + f"{bits:o}"), bits)

    def test_octal_mode_refused(self) -> None:
        """Non-octal text, more than 0o7777, signs and spaces are refused with ``invalid mode``."""
        for text in ("", "8", "0x1ff", "17777", "-755", " 755", "rwx", "0o", "0o0o7"):
            with self.assertRaises(BadRequest) as caught:
                FILE_MODE.parse("mode", text)
            self.assertIn("invalid mode", caught.exception.message)
