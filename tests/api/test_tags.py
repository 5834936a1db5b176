"""
Tests for ``GET``/``PATCH /vm/{hostname}/tags`` (:mod:`vmservice.api.tags`)
and the parser of their body (:func:`vmservice.api.inputs.tags.tag_edit`), through
a real Site and Agent over in-memory connections, with the fleet on fakes.
"""

from __future__ import annotations

import json
from io import BytesIO
from typing import Any

from hypothesis import given, strategies as st
from treq.testing import StubTreq
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from tests.api.fleet_api import ApiTestCase
from vmservice.api.app import Api
from vmservice.api.inputs.tags import tag_edit
from vmservice.api.resources import every_route
from vmservice.errors import BadRequest
from vmservice.nodes.model import MAX_TAG_LENGTH, MAX_TAGS, tag_problem
from vmservice.nodes.tagging import TagEdit


def _request(body: Any) -> DummyRequest:
    request = DummyRequest([b""])
    request.method = b"PATCH"
    request.content = BytesIO(body if isinstance(body, bytes) else json.dumps(body).encode())
    return request


class TagEditParserTests(SynchronousTestCase):
    """The body of a tag change, parsed in one place."""

    def refused(self, body: Any, words: str = "") -> BadRequest:
        error = self.assertRaises(BadRequest, tag_edit, _request(body))
        self.assertEqual(error.code, "invalid_body")
        self.assertIn(words, error.message)
        return error

    def test_each_form(self) -> None:
        """add, remove, add with remove, and replace (also empty) parse; lists collapse duplicates."""
        self.assertEqual(tag_edit(_request({"add": ["a", "b", "a"]})), TagEdit(add=("a", "b")))
        self.assertEqual(tag_edit(_request({"remove": ["a"]})), TagEdit(remove=("a",)))
        self.assertEqual(tag_edit(_request({"add": ["a"], "remove": ["b"]})), TagEdit(add=("a",), remove=("b",)))
        self.assertEqual(tag_edit(_request({"replace": []})), TagEdit(replace=()))
        self.assertEqual(tag_edit(_request({"replace": ["x", "x"], "add": None})), TagEdit(replace=("x",)))
        self.assertEqual(tag_edit(_request({"add": []})), TagEdit())

    def test_none_given(self) -> None:
        """An empty body, {} and only nulls are refused."""
        self.refused(b"", "body is required")
        self.refused({}, "one of 'add', 'remove' or 'replace'")
        self.refused({"add": None, "remove": None, "replace": None}, "one of")

    def test_replace_with_another(self) -> None:
        """replace with add or remove is refused (the Go client's rule)."""
        self.refused({"replace": ["a"], "add": ["b"]}, "cannot be combined")
        self.refused({"replace": [], "remove": []}, "cannot be combined")

    def test_added_and_removed(self) -> None:
        """A tag both added and removed is refused."""
        self.refused({"add": ["a", "b"], "remove": ["b"]}, "'b' is both added and removed")

    def test_bad_values(self) -> None:
        """Wrong types, unknown keys, bad tags and too long lists are refused, naming the field."""
        self.refused({"add": "a"}, "add")
        self.refused({"add": [1]}, "add")
        self.refused({"tags": ["a"]}, "tags")
        self.refused({"add": [""]}, "field 'add[0]': tags must not be empty")
        self.refused({"remove": ["ok", "a\x00"]}, "field 'remove[1]': tags must not contain control characters")
        self.refused({"replace": ["x" * (MAX_TAG_LENGTH + 1)]}, f"at most {MAX_TAG_LENGTH} characters")
        self.refused({"add": [f"t{i}" for i in range(MAX_TAGS + 1)]}, f"at most {MAX_TAGS} tags")
        self.refused(b"[]", "JSON object")

    @given(st.lists(st.text(max_size=MAX_TAG_LENGTH + 2), max_size=4))
    def test_the_one_rule(self, tags: list[str]) -> None:
        """A list parses exactly when every tag passes tag_problem, the rule of create too."""
        valid = all(tag_problem(tag) is None for tag in tags)
        try:
            edit = tag_edit(_request({"replace": tags}))
        except BadRequest:
            self.assertFalse(valid)
        else:
            self.assertTrue(valid)
            self.assertEqual(edit.replace, tuple(dict.fromkeys(tags)))


class TagRouteTests(ApiTestCase):
    """The routes, end to end on fakes."""

    def setUp(self) -> None:
        super().setUp()
        routes = every_route(self.h.fleet, self.h.reactor, self.metrics)
        self.api = Api(self.h.reactor, routes, self.metrics, self.token)
        self.treq = StubTreq(self.api.resource())
        self.assertEqual(self.call("POST", "/hostgroup/demo/nodes", b'{"tags": ["a", "b"]}')[0], 201)

    def patch(self, body: Any, hostname: str = "demo-1") -> tuple[int, Any, Any]:
        return self.call("PATCH", f"/vm/{hostname}/tags", json.dumps(body).encode())

    def test_get(self) -> None:
        """GET answers the hostname and the tags in their order."""
        self.assertEqual(self.call("GET", "/vm/demo-1/tags")[:2], (200, {"hostname": "demo-1", "tags": ["a", "b"]}))

    def test_patch_each_form(self) -> None:
        """add, remove, add with remove and replace answer the new tags; GET and the listing agree."""
        self.assertEqual(self.patch({"add": ["c", "a"]})[:2], (200, {"hostname": "demo-1", "tags": ["a", "b", "c"]}))
        self.assertEqual(self.patch({"remove": ["a", "zz"]})[1]["tags"], ["b", "c"])
        self.assertEqual(self.patch({"add": ["d"], "remove": ["b"]})[1]["tags"], ["c", "d"])
        self.assertEqual(self.patch({"replace": ["x", "y", "x"]})[1]["tags"], ["x", "y"])
        self.assertEqual(self.call("GET", "/vm/demo-1/tags")[1]["tags"], ["x", "y"])
        self.assertEqual(self.call("GET", "/nodes")[1][0]["tags"], ["x", "y"])
        self.assertEqual(self.patch({"replace": []})[1], {"hostname": "demo-1", "tags": []})

    def test_filters_see_it_at_once(self) -> None:
        """GET /nodes?tag= and /hostgroup/{g}/nodes?tag_prefix= see a change at once."""
        names = lambda path: [n["hostname"] for n in self.call("GET", path)[1]]
        self.assertEqual(names("/nodes?tag=env%3Dprod"), [])
        self.patch({"add": ["env=prod"]})
        self.assertEqual(names("/nodes?tag=env%3Dprod"), ["demo-1"])
        self.assertEqual(names("/hostgroup/demo/nodes?tag_prefix=env%3D"), ["demo-1"])
        self.patch({"remove": ["env=prod"]})
        self.assertEqual(names("/nodes?tag_prefix=env"), [])

    def test_both_filters_are_refused(self) -> None:
        """tag and tag_prefix together are 400 conflicting_filters, on both listings."""
        self.assertError(self.call("GET", "/nodes?tag=a&tag_prefix=a"), 400, "conflicting_filters")
        self.assertError(self.call("GET", "/hostgroup/demo/nodes?tag=a&tag_prefix=b"), 400, "conflicting_filters")

    def test_errors(self) -> None:
        """Unknown node 404, bad hostname 400, bad bodies 400, too many tags 400: ErrorResponses."""
        self.assertError(self.call("GET", "/vm/demo-9/tags"), 404, "node_not_found")
        self.assertError(self.patch({"add": ["a"]}, "demo-9"), 404, "node_not_found")
        self.assertError(self.call("GET", "/vm/Bad_Name/tags"), 400, "invalid_hostname")
        self.assertError(self.patch({"add": ["a"]}, "Bad_Name"), 400, "invalid_hostname")
        self.assertError(self.patch({}), 400, "invalid_body")
        self.assertError(self.patch({"add": ["a"], "replace": []}), 400, "invalid_body")
        self.assertError(self.patch({"add": [""]}), 400, "invalid_body")
        self.assertError(self.call("PATCH", "/vm/demo-1/tags", b"{"), 400, "invalid_json")
        self.assertError(self.call("PATCH", "/vm/demo-1/tags"), 400, "invalid_body")
        self.assertError(self.patch({"add": [f"t{i}" for i in range(MAX_TAGS - 1)]}), 400, "too_many_tags")
        self.assertEqual(self.call("GET", "/vm/demo-1/tags")[1]["tags"], ["a", "b"])
        self.assertError(self.call("POST", "/vm/demo-1/tags", b"{}"), 405, "method_not_allowed")

    def test_create_uses_the_same_rule(self) -> None:
        """Create refuses the tags a change refuses, and collapses duplicates the same way."""
        self.assertError(self.call("POST", "/hostgroup/demo/nodes", b'{"tags": ["a\\u0007"]}'), 400, "invalid_body")
        too_many = json.dumps({"tags": [f"t{i}" for i in range(MAX_TAGS + 1)]}).encode()
        self.assertError(self.call("POST", "/hostgroup/demo/nodes", too_many), 400, "invalid_body")
        code, body, _ = self.call("POST", "/hostgroup/demo/nodes", b'{"tags": ["q", "q"]}')
        self.assertEqual(code, 201)
        self.assertEqual(self.call("GET", f"/vm/{body['hostname']}/tags")[1]["tags"], ["q"])
