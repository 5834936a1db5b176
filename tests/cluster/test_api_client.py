"""
Tests for :mod:`vmservice.cluster.api_client`, :mod:`vmservice.cluster.api_errors`
and :mod:`vmservice.cluster.node_api` against the fake API server.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster.fake_api import FakeApi, fake_client, merge_patch, status
from vmservice.cluster.api_client import ApiClient
from vmservice.cluster.api_errors import (
    ApiError, BadResponse, Conflict, Forbidden, Gone, NotFound, Unauthorized, Unavailable, excerpt, status_error,
)
from vmservice.cluster.node_api import NodeApi


class Hanging:
    """An HTTP client that never answers."""

    def __init__(self) -> None:
        self.calls: list[Deferred[Any]] = []

    def request(self, method: str, url: str, **kwargs: Any) -> Deferred[Any]:
        call: Deferred[Any] = Deferred()
        self.calls.append(call)
        return call


class ClientTests(SynchronousTestCase):
    """Calls, answers and typed errors."""

    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.api = FakeApi()
        self.client, _ = fake_client(self.clock, self.api, max_body=1024)
        self.nodes = NodeApi(self.client, "vms-a")

    def test_create_get_patch(self) -> None:
        """A Node made, read, merge-patched (labels, status), with the token and JSON content types."""
        created = self.successResultOf(self.nodes.create_node({"kind": "Node", "metadata": {"name": "vms-a"}}))
        self.assertEqual(created["metadata"]["uid"], "uid-vms-a")
        self.successResultOf(self.nodes.patch_node({"metadata": {"labels": {"a": "b"}}}))
        node = self.successResultOf(self.nodes.patch_status({"capacity": {"pods": "3"}}))
        self.assertEqual((node["metadata"]["labels"], node["status"]), ({"a": "b"}, {"capacity": {"pods": "3"}}))
        self.assertEqual(self.successResultOf(self.nodes.get_node())["status"]["capacity"], {"pods": "3"})

    def test_not_found_and_conflict(self) -> None:
        """404 and 409 as their errors, with the Status's reason and message."""
        error = self.failureResultOf(self.nodes.get_lease(), NotFound).value
        self.assertEqual((error.status, error.reason), (404, "NotFound"))
        self.successResultOf(self.nodes.create_node({"kind": "Node", "metadata": {"name": "vms-a"}}))
        error = self.failureResultOf(self.nodes.create_node({"kind": "Node", "metadata": {"name": "vms-a"}}),
                                     Conflict).value
        self.assertEqual(str(error), "409 AlreadyExists: vms-a exists")

    def test_wrong_kind(self) -> None:
        """An answer of another kind than asked for is a BadResponse."""
        self.api.queue("GET", "/nodes/", 200, b'{"kind": "Pod"}')
        self.failureResultOf(self.nodes.get_node(), BadResponse)

    def test_malformed_and_huge(self) -> None:
        """Not JSON, not an object, or over the bound: BadResponse."""
        for body in (b"{", b"[1, 2]", b'{"kind": "Node", "pad": "' + b"x" * 2000 + b'"}'):
            self.api.queue("GET", "/nodes/", 200, body)
            self.failureResultOf(self.nodes.get_node(), BadResponse)

    def test_unauthorized_rereads_token_once(self) -> None:
        """A 401 reads the token again and tries once more; a second 401 is Unauthorized."""
        tokens = iter(["stale", "token-1"])
        client = ApiClient(self.clock, fake_client(self.clock, self.api)[1], "https://127.0.0.1:6443",
                           lambda: next(tokens))
        self.failureResultOf(NodeApi(client, "vms-a").get_node(), NotFound)
        self.failureResultOf(self.nodes.get_node(), NotFound)
        self.api.tokens = {"other"}
        self.failureResultOf(self.nodes.get_node(), Unauthorized)
        self.assertEqual(len([r for r in self.api.requests if r[0] == "GET"]), 5)  # 2 + 1 + 2

    def test_timeout(self) -> None:
        """A call with no answer within its timeout is Unavailable, its request cancelled."""
        hanging = Hanging()
        client = ApiClient(self.clock, hanging, "https://127.0.0.1:6443", lambda: "t", timeout=5)
        call = client.call("GET", "/api/v1/nodes/x")
        self.clock.advance(5)
        self.assertEqual(self.failureResultOf(call, Unavailable).value.reason, "Timeout")
        self.assertTrue(hanging.calls[0].called)

    def test_status_errors(self) -> None:
        """Each status as its error; a body that is no Status gives a bounded excerpt."""
        for code, kind in ((401, Unauthorized), (403, Forbidden), (404, NotFound), (409, Conflict), (410, Gone),
                           (500, Unavailable), (503, Unavailable), (422, ApiError)):
            self.assertIs(type(status_error(code, status(code, "R", "m"))), kind)
        error = status_error(502, b"<html>" + b"\x1b[31m" * 500)
        self.assertEqual(error.reason, "HTTP 502")
        self.assertLessEqual(len(error.message), 301)
        self.assertNotIn("\x1b", error.message)

    def test_excerpt(self) -> None:
        """One printable line, bounded."""
        self.assertEqual(excerpt("a\nb\x00c"), "a b c")
        self.assertEqual(len(excerpt("x" * 1000)), 301)

    def test_no_redirects_followed(self) -> None:
        """A redirect is not followed (the token stays with the configured server): it is an error."""
        self.api.queue("GET", "/nodes/", 302, b"")
        self.assertEqual(self.failureResultOf(self.nodes.get_node(), ApiError).value.status, 302)

    def test_merge_patch_fake(self) -> None:
        """The fake's merge patch (RFC 7386): nested merge, null removes, lists replaced."""
        self.assertEqual(merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}),
                         {"a": {"c": 2, "d": 3}, "l": [2]})
        self.assertEqual(json.loads(status(404, "NotFound"))["code"], 404)
