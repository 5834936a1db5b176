"""Tests for :mod:`vmservice.e2b.inputs`: the request bodies, read strictly and bounded."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.e2b import inputs
from vmservice.e2b.inputs import MAX_BODY, NewSandbox
from vmservice.errors import BadRequest


def body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


class NewSandboxTests(SynchronousTestCase):
    def test_as_the_sdks_send_it(self) -> None:
        """What the current SDKs send, their extra keys ignored; what 2.45 sends (``secure``) too."""
        self.assertEqual(inputs.new_sandbox(body(
            templateID="base", autoPause=True, metadata={"k": "v"}, timeout=300, envVars={"A": "1"}, mcp=None,
            allow_internet_access=True, network={"allowOut": []}, autoResume={"enabled": False}), 3600),
            NewSandbox("base", 300, True, (("k", "v"),), (("A", "1"),), True))
        self.assertEqual(inputs.new_sandbox(body(templateID="team/x:v1", secure=False), 3600),
                         NewSandbox("team/x:v1", secure=False))

    def test_bad(self) -> None:
        """Each bad input is a 400 naming what is wrong."""
        cases: list[tuple[bytes, str]] = [
            (b"", "the body is not JSON"),
            (b"[1]", "the body is not a JSON object"),
            (b"{" * 100_000, "the body is not JSON"),
            (b" " * (MAX_BODY + 1), "the body is over 1048576 bytes"),
            (body(), "templateID must be a template id"),
            (body(templateID="../x"), "templateID must be a template id"),
            (body(templateID="base", timeout="300"), "timeout must be a whole number of seconds"),
            (body(templateID="base", timeout=True), "timeout must be a whole number of seconds"),
            (body(templateID="base", timeout=3601), "timeout must be from 0 to 3600 seconds"),
            (body(templateID="base", timeout=-1), "timeout must be from 0 to 3600 seconds"),
            (body(templateID="base", autoPause="yes"), "autoPause must be true or false"),
            (body(templateID="base", metadata=["k"]), "metadata must be an object of strings"),
            (body(templateID="base", metadata={"k": 1}), "metadata must be an object of strings"),
            (body(templateID="base", metadata={str(i): "" for i in range(65)}), "metadata has at most 64 keys"),
            (body(templateID="base", metadata={"": "v"}), "metadata keys have 1 to 128 characters"),
            (body(templateID="base", metadata={"k": "v" * 1025}), "metadata keys have 1 to 128 characters"),
            (body(templateID="base", envVars={"1A": "v"}), "bad environment variable name '1A'"),
            (body(templateID="base", envVars={"A": "\0"}), "an environment variable's value has at most"),
            (body(templateID="base", envVars={f"A{i}": "" for i in range(257)}), "envVars has at most 256"),
            (body(templateID="base", envVars={f"A{i}": "v" * 30_000 for i in range(10)}),
             "envVars hold at most 262144 characters in all"),
        ]
        for given, message in cases:
            error = self.assertRaises(BadRequest, inputs.new_sandbox, given, 3600)
            self.assertTrue(error.message.startswith(message), (given[:60], error.message))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=10)
KEYS = st.sampled_from(["templateID", "timeout", "autoPause", "metadata", "envVars", "secure", "other"])


class AnyBodyTests(SynchronousTestCase):
    @given(st.dictionaries(KEYS, JSON | st.just("base"), max_size=7))
    def test_read_or_refused(self, fields: dict[str, Any]) -> None:
        """Any JSON object is a create or a 400, nothing else; every parser alike."""
        raw = json.dumps(fields).encode()
        for parse in (lambda: inputs.new_sandbox(raw, 3600), lambda: inputs.set_timeout(raw, 3600),
                      lambda: inputs.connect(raw, 3600), lambda: inputs.pause(raw)):
            try:
                parse()
            except BadRequest:
                pass


class OtherBodiesTests(SynchronousTestCase):
    def test_timeout(self) -> None:
        """set_timeout needs a timeout (0 included); connect takes none, or an empty body; pause any object."""
        self.assertEqual(inputs.set_timeout(body(timeout=0), 10), 0)
        self.assertRaises(BadRequest, inputs.set_timeout, body(), 10)
        self.assertRaises(BadRequest, inputs.set_timeout, b"", 10)
        self.assertEqual(inputs.connect(body(timeout=5, memory=False), 10), 5)
        self.assertIsNone(inputs.connect(b"", 10))
        self.assertIsNone(inputs.connect(body(), 10))
        self.assertRaises(BadRequest, inputs.connect, body(timeout=11), 10)
        inputs.pause(b"")
        inputs.pause(body(memory=True, requireHealthyGuest=True))
        self.assertRaises(BadRequest, inputs.pause, b"null")
