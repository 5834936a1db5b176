"""
Every route of the API against generated input: what the OpenAPI document
allows is never refused as invalid, and malformed input (non-ASCII text,
invalid UTF-8, broken percent-encoding) in any query parameter or path
segment is a 400 ErrorResponse, never a dropped connection or a 500.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.error import ConnectionLost
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import parse_response
from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.api.openapi import openapi_document
from vmservice.api.query import parameters, parse_query
from vmservice.api.resources import every_route
from vmservice.api.routing import PATH_KINDS, Route
from vmservice.api.streaming import StreamingSite
from vmservice.errors import BadRequest
from vmservice.metrics import Metrics
from vmservice.secretstore import SecretStore
from vmservice.nodes.model import CreateRequest, Wait

#: Lookarounds at the start of a pattern: kept for checking, dropped for generating.
_LOOKAROUND = re.compile(r"^\(\?[=!](?:[^()]|\([^()]*\))*\)")


def _pattern_values(pattern: str) -> st.SearchStrategy[str]:
    """Texts that match a JSON-schema pattern (``^…$``), the way a client would build them."""
    body = pattern[1:-1]
    generating = body
    while _LOOKAROUND.match(generating):
        generating = _LOOKAROUND.sub("", generating, count=1)
    return st.from_regex(f"^{generating}$", fullmatch=True).filter(lambda text: re.fullmatch(body, text) is not None)


def _values(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """Query values valid by ``schema``, as text."""
    if "anyOf" in schema:
        return st.one_of([_values(choice) for choice in schema["anyOf"]])
    if schema.get("type") == "string" and schema.get("maxLength") == 0:
        return st.just("")
    if schema.get("type") == "boolean":
        return st.sampled_from(["true", "false"])
    if schema.get("type") == "integer":
        return st.integers(schema.get("minimum", -(2**40)), schema.get("maximum", 2**40)).map(str)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    values = _pattern_values(schema["pattern"]) if "pattern" in schema else st.text()
    return values.filter(lambda text: len(text) >= schema.get("minLength", 0))


def _queries(operation: dict[str, Any]) -> st.SearchStrategy[dict[bytes, list[bytes]]]:
    """Whole query strings valid by an operation's documented parameters."""
    items = []
    for parameter in operation.get("parameters", []):
        if parameter["in"] != "query":
            continue
        name, schema = parameter["name"].encode(), parameter["schema"]
        if schema.get("type") == "array":
            values = st.lists(_values(schema["items"]).map(str.encode), min_size=schema.get("minItems", 0),
                              max_size=3)
        else:
            values = _values(schema).map(lambda text: [text.encode()])
        if not parameter["required"]:
            values = st.one_of(st.just([]), values)
        items.append(st.tuples(st.just(name), values))
    return st.tuples(*items).map(lambda pairs: {name: value for name, value in pairs if value})


def _harness(case: SynchronousTestCase) -> tuple[FleetHarness, Api]:
    # A short state directory: mktemp() names are too long for the nodes' socket paths.
    h = FleetHarness(os.path.relpath(tempfile.mkdtemp(prefix="fz", dir=".")))
    h.fleet.startService()
    case.successResultOf(h.fleet.create("demo", CreateRequest(), Wait.NONE, 60))
    h.agents[0].ready()
    metrics = Metrics()
    secrets = SecretStore(h.config.state_dir, h.reactor)
    return h, Api(h.reactor, every_route(h.fleet, h.reactor, metrics, secrets), metrics, None)


def _accepts_empty(schema: dict[str, Any]) -> bool:
    """Whether the empty string is valid by ``schema``."""
    if "anyOf" in schema:
        return any(_accepts_empty(choice) for choice in schema["anyOf"])
    if schema.get("type", "string") != "string":
        return False
    if "enum" in schema:
        return "" in schema["enum"]
    if schema.get("minLength", 0) > 0:
        return False
    return "pattern" not in schema or re.fullmatch(schema["pattern"][1:-1], "") is not None


class SchemaValidTests(SynchronousTestCase):
    """What the OpenAPI document allows, the parser accepts."""

    def setUp(self) -> None:
        self.h, self.api = _harness(self)
        self.document = openapi_document(self.api.routes)

    def _check(self, route: Route, data: st.DataObject) -> None:
        operation = self.document["paths"][route.path][route.method.lower()]
        query = data.draw(_queries(operation))
        try:
            parse_query(query, route.query)
        except BadRequest as error:
            self.fail(f"{route.method} {route.path} refused {query!r}: {error}")

    @settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(st.data())
    def test_documented_queries_parse(self, data: st.DataObject) -> None:
        """A query valid by a route's documented parameters (types, patterns, bounds, minLength) parses."""
        route = data.draw(st.sampled_from([r for r in self.api.routes if parameters(r.query)]))
        self._check(route, data)

    def test_empty_refused_is_documented(self) -> None:
        """
        Every query parameter and path value the parser refuses empty has a
        schema that refuses it too (``minLength: 1``, a pattern, an enum or a
        type without an empty form), so no schema-valid request is refused so.
        """
        checked = 0
        for route in self.api.routes:
            operation = self.document["paths"][route.path][route.method.lower()]
            schemas = {(p["in"], p["name"]): p["schema"] for p in operation.get("parameters", [])}
            for name, kind, _, required, repeated in parameters(route.query):
                if kind.empty_is_absent:
                    refused = required
                else:
                    try:
                        kind.parse(name, "")
                        refused = False
                    except BadRequest:
                        refused = True
                schema = schemas[("query", name)]
                if refused:
                    checked += 1
                    self.assertFalse(_accepts_empty(schema["items"] if repeated else schema), (route.path, name))
            for name in re.findall(r"\{(\w+)\}", route.path):
                checked += 1
                self.assertRaises(BadRequest, PATH_KINDS[name].parse, name, "")
                self.assertFalse(_accepts_empty(schemas[("path", name)]), (route.path, name))
        self.assertGreater(checked, 40)

    def test_every_parameter_is_documented(self) -> None:
        """Each parameter of each route's query class is in the document, with a schema."""
        for route in self.api.routes:
            operation = self.document["paths"][route.path][route.method.lower()]
            documented = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
            self.assertEqual(documented, {name for name, *_ in parameters(route.query)}, route.path)


#: Values no parameter takes: invalid UTF-8 after percent-decoding, or NUL.
_INVALID = st.sampled_from(["%FF", "%C3", "%C3%28", "%E2%82", "%00", "%ED%A0%80", "a%FFb", "%C0%80"])
#: Non-ASCII text and broken percent-encoding: refused by every parameter with a form.
_NASTY = st.one_of(
    _INVALID,
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x2FFF, blacklist_categories=("Cs",)),
            min_size=1, max_size=8).map(lambda text: quote(text, safe="")),
    st.sampled_from(["%ZZ", "%", "%09%C3%81", "%C3%81"]),
)


def _free_text(schema: dict[str, Any]) -> bool:
    """Whether a parameter takes any text (but NUL)."""
    return schema.get("type") == "string" and "enum" not in schema and schema.get("pattern") == "^[^\\u0000]*$"


class MalformedInputTests(SynchronousTestCase):
    """Malformed input anywhere is a 400 ErrorResponse, never a dropped connection or a 500."""

    def setUp(self) -> None:
        self.h, self.api = _harness(self)
        self.site = StreamingSite(self.api.resource(), self.api.plan_body, reactor=self.h.reactor)

    def request(self, method: str, target: str) -> tuple[int, dict[bytes, bytes], bytes]:
        channel = self.site.buildProtocol(None)
        transport = StringTransport()
        channel.makeConnection(transport)
        channel.dataReceived(f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode("latin-1"))
        self.h.reactor.advance(0)
        raw = transport.value()
        if not transport.disconnecting:
            channel.connectionLost(Failure(ConnectionLost()))
        self.assertTrue(raw, f"{method} {target}: no response at all")
        return parse_response(raw)

    def assertRefused(self, method: str, target: str, statuses: tuple[int, ...] = (400,)) -> None:
        status, headers, body = self.request(method, target)
        self.assertIn(status, statuses, (method, target, body))
        self.assertEqual(headers[b"content-type"], b"application/json", (method, target))
        self.assertIsInstance(json.loads(body)["error"], str)

    def _path(self, route: Route, segment: str | None = None, at: str | None = None) -> str:
        """
        ``route``'s path with valid values, but ``segment`` in place of
        placeholder ``at`` (of every placeholder when ``at`` is None).
        """
        values = {"hostname": "demo-1", "node": "demo-1", "name": "demo", "secret": "demo", "exec_id": "ex_00"}
        path = route.path
        for name, value in values.items():
            chosen = segment if segment is not None and at in (None, name) else value
            path = path.replace("{" + name + "}", chosen)
        self.assertNotIn("{", path, "a placeholder without a value")
        return path

    @settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def test_query_values(self, data: st.DataObject) -> None:
        """
        A malformed value of any query parameter of any route is 400 (the
        regression of ``relaunch?wait=%09%C3%81``, which dropped the connection):
        invalid UTF-8 or NUL anywhere, non-ASCII where a value has a form.
        """
        route = data.draw(st.sampled_from([r for r in self.api.routes if parameters(r.query)]))
        name, kind, *_ = data.draw(st.sampled_from(parameters(route.query)))
        value = data.draw(_INVALID if _free_text(kind.schema()) else _NASTY)
        self.assertRefused(route.method, f"{self._path(route)}?{name}={value}")

    @settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def test_path_segments(self, data: st.DataObject) -> None:
        """A malformed path segment (node, group, secret or exec id) is a 400 (or a 404 for a name), never a 500."""
        route = data.draw(st.sampled_from([r for r in self.api.routes if "{" in r.path]))
        at = data.draw(st.sampled_from(re.findall(r"\{(\w+)\}", route.path)))
        segment = data.draw(_NASTY)
        self.assertRefused(route.method, self._path(route, segment, at), (400, 404))

    def test_free_text_with_unicode(self) -> None:
        """Text parameters take any UTF-8, non-ASCII included: a tag filter with é simply matches nothing."""
        status, _, body = self.request("GET", "/nodes?tag=%C3%A9t%C3%A9")
        self.assertEqual((status, json.loads(body)), (200, []))
        self.assertRefused("GET", "/nodes?tag=%FF")
