"""
Tests for the generated OpenAPI document: it describes exactly the routes
that are mounted, and every model it references.
"""

from __future__ import annotations

import base64
import io
import json
import re
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.api.inputs.nodes import create_request
from vmservice.api.openapi import openapi_document
from vmservice.errors import BadRequest
from vmservice.api.resources import every_route
from vmservice.api.routing import documented_methods
from vmservice.metrics import Metrics
from vmservice.secretstore import SecretStore


class OpenApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        h = FleetHarness(self.mktemp())
        metrics = Metrics()
        self.routes = every_route(h.fleet, h.reactor, metrics, SecretStore(h.config.state_dir, h.reactor))
        self.api = Api(h.reactor, self.routes, metrics, None)
        self.document = openapi_document(self.routes)

    def test_every_route_described_and_every_description_routed(self) -> None:
        """The (method, path) pairs of the document are exactly those Klein routes."""
        described = {
            (method.upper(), path) for path, item in self.document["paths"].items() for method in item
        }
        routed = set()
        for rule in self.api.app.url_map.iter_rules():
            path = rule.rule.replace("<", "{").replace(">", "}")
            for method in rule.methods or ():
                if method == "OPTIONS":
                    continue
                routed.add((method, path))
        declared = {(m, r.path) for r in self.routes for m in documented_methods(r)}
        self.assertEqual(described, declared)
        # Werkzeug adds HEAD to every GET rule; the document names HEAD where it means something.
        self.assertEqual({pair for pair in routed if pair[0] != "HEAD"}, {p for p in described if p[0] != "HEAD"})
        self.assertTrue({p for p in described if p[0] == "HEAD"} <= routed)

    def test_references_resolve(self) -> None:
        """Every $ref points at a schema in components."""
        text = json.dumps(self.document)
        schemas = self.document["components"]["schemas"]
        for ref in set(part.split('"')[0] for part in text.split('"$ref": "#/components/schemas/')[1:]):
            self.assertIn(ref, schemas)

    def test_models(self) -> None:
        """Models carry their fields, types and required lists from the attrs classes."""
        schemas = self.document["components"]["schemas"]
        node = schemas["Node"]
        self.assertEqual(node["properties"]["created_at"], {"type": "string", "format": "date-time"})
        self.assertEqual(node["properties"]["tags"], {"type": "array", "items": {"type": "string"}})
        self.assertIn("hostname", node["required"])
        self.assertEqual(schemas["CreateNodeRequest"]["required"], [])
        self.assertEqual(self.document["openapi"], "3.1.0")

    def test_security(self) -> None:
        """Only /healthz is described without bearer security (and /metrics when its routes say it is public)."""
        def public(document: dict[str, Any]) -> set[str]:
            return {path for path, item in document["paths"].items() for op in item.values() if "security" not in op}

        self.assertEqual(public(self.document), {"/healthz"})
        h = FleetHarness(self.mktemp())
        routes = every_route(h.fleet, h.reactor, Metrics(), public_metrics=True)
        self.assertEqual(public(openapi_document(routes)), {"/healthz", "/metrics"})

    def test_admission_refusals(self) -> None:
        """Create, restore, relaunch and fork document 503 (insufficient_memory) with an ErrorResponse; create and fork 409."""
        paths = self.document["paths"]
        for path in ("/hostgroup/{name}/nodes", "/vm/{hostname}/restore", "/vm/{hostname}/relaunch",
                     "/vm/{hostname}/fork"):
            reply = paths[path]["post"]["responses"]["503"]
            self.assertIn("insufficient_memory", reply["description"])
            self.assertEqual(reply["content"]["application/json"]["schema"],
                             {"$ref": "#/components/schemas/ErrorResponse"})
        for path in ("/hostgroup/{name}/nodes", "/vm/{hostname}/fork"):
            self.assertIn("max_nodes_reached", paths[path]["post"]["responses"]["409"]["description"])


def _create(body: dict[str, object]) -> bool:
    """Whether the create parser accepts ``body``."""
    request = DummyRequest([b""])
    request.content = io.BytesIO(json.dumps(body).encode())
    try:
        create_request(request)
    except BadRequest:
        return False
    return True


class CreateBodyTests(SynchronousTestCase):
    """The create body's lists are documented as the parser takes their items."""

    def setUp(self) -> None:
        h = FleetHarness(self.mktemp())
        metrics = Metrics()
        routes = every_route(h.fleet, h.reactor, metrics, SecretStore(h.config.state_dir, h.reactor))
        self.properties = openapi_document(routes)["components"]["schemas"]["CreateNodeRequest"]["properties"]

    @given(st.one_of(st.text(max_size=8), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,130}", fullmatch=True)))
    def test_secret_names(self, name: str) -> None:
        """A secret's name in ``secrets`` is valid by the document exactly when the parser takes it."""
        pattern = self.properties["secrets"]["items"]["pattern"]
        self.assertEqual(re.fullmatch(pattern[1:-1], name) is not None, _create({"secrets": [name]}), name)

    def test_empty_ssh_key(self) -> None:
        """An empty key is refused, and the document says so."""
        self.assertFalse(_create({"ssh_keys": [""]}))
        self.assertEqual(self.properties["ssh_keys"]["items"]["minLength"], 1)


class ContentTests(SynchronousTestCase):
    """What the document says of bodies, as schema readers take it (the fuzzer among them)."""

    def setUp(self) -> None:
        h = FleetHarness(self.mktemp())
        metrics = Metrics()
        self.document = openapi_document(every_route(h.fleet, h.reactor, metrics,
                                                     SecretStore(h.config.state_dir, h.reactor)))

    def content(self, path: str, method: str, status: str) -> dict[str, Any]:
        result: dict[str, Any] = self.document["paths"][path][method]["responses"][status]["content"]
        return result

    def test_event_streams_describe_each_event(self) -> None:
        """An event stream's schema is one event (an object whose data is JSON), not a string."""
        for path in ("/events", "/vm/{hostname}/fs/watch"):
            schema = self.content(path, "get", "200")["text/event-stream"]["schema"]
            self.assertEqual(schema["type"], "object")
            self.assertEqual(schema["properties"]["data"]["contentMediaType"], "application/json")

    def test_exec_answers_ndjson_or_json(self) -> None:
        """An exec's 200 is NDJSON when streamed and one JSON object when buffered: both are documented."""
        content = self.content("/vm/{hostname}/exec", "post", "200")
        self.assertEqual(set(content), {"application/x-ndjson", "application/json"})
        self.assertEqual(content["application/json"]["schema"], {"type": "object"})

    def test_bodies_required_where_a_field_is(self) -> None:
        """
        A body that needs a field (or one of several) must be sent; one whose
        fields all have defaults may be left out (a create).
        """
        required = {
            (path, method): operation["requestBody"]["required"]
            for path, item in self.document["paths"].items()
            for method, operation in item.items() if "requestBody" in operation
        }
        self.assertTrue(required[("/vm/{hostname}/tags", "patch")])
        self.assertTrue(required[("/secrets", "post")])
        self.assertTrue(required[("/vm/{hostname}/fs/mkdir", "post")])
        self.assertFalse(required[("/hostgroup/{name}/nodes", "post")])

    def test_optional_fields_may_be_null(self) -> None:
        """An optional field the parser takes null for (a secret's gid) allows null; a required one does not."""
        schemas = self.document["components"]["schemas"]
        create = schemas["CreateSecretRequest"]["properties"]
        self.assertEqual(create["gid"]["type"], ["integer", "null"])
        self.assertNotIn("null", json.dumps(schemas["Secret"]["properties"]["gid"]))


class PatternAgreementTests(SynchronousTestCase):
    """Where the document states a value's form as a pattern, it says what the parser takes, no more, no less."""

    @given(st.one_of(
        st.text(max_size=40),
        st.builds(lambda h, p: f"{h}:{p}", st.text(max_size=12), st.integers(-5, 70000)),
        st.builds(lambda h, p: f"[{h}]:{p}", st.text("0123456789abcdef:.", max_size=12), st.integers(0, 65536)),
        st.builds(lambda p: f"unix:{p}", st.text(max_size=120)),
    ))
    @example("unix:1")  # not a host "unix": the parser reads "unix:" as a socket path
    def test_upstream(self, text: str) -> None:
        import re

        from vmservice.api.forwarding import UPSTREAM_PATTERN
        from vmservice.wire.upstream import Upstream

        try:
            Upstream.parse(text)
            parsed = True
        except ValueError:
            parsed = False
        if text.startswith("unix:") and len(text[5:].encode("utf-8", "surrogateescape")) > len(text[5:]):
            return  # a pattern counts characters, the kernel bytes: a non-ASCII path near the limit may differ
        self.assertEqual(re.fullmatch(UPSTREAM_PATTERN, text) is not None, parsed, text)

    @given(st.one_of(st.text(max_size=24), st.binary(max_size=18).map(lambda b: base64.b64encode(b).decode()),
                     st.text("QUJDRA=\n \t", max_size=24)))
    def test_base64(self, text: str) -> None:
        import re

        from vmservice.api.inputs.secrets import _secret_content
        from vmservice.api.models.secrets import BASE64_PATTERN

        try:
            _secret_content({"data": text})
            parsed = True
        except BadRequest:
            parsed = False
        self.assertEqual(re.fullmatch(BASE64_PATTERN, text) is not None, parsed, text)
