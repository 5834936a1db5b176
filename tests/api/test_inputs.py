"""Tests for :mod:`vmservice.api.inputs`: JSON bodies, modes from headers, wait and shutdown actions."""

from __future__ import annotations

import io
import json
from typing import Any

from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from vmservice.api import inputs
from vmservice.errors import BadRequest
from vmservice.nodes.model import CreateRequest, Wait
from vmservice.nodes.transitions import Op


def _request(body: Any = b"", headers: dict[bytes, bytes] | None = None) -> DummyRequest:
    request = DummyRequest([b""])
    request.content = io.BytesIO(body if isinstance(body, bytes) else json.dumps(body).encode())
    for name, value in (headers or {}).items():
        request.requestHeaders.addRawHeader(name, value)
    return request


class BodyTests(SynchronousTestCase):
    def test_create(self) -> None:
        """A create body becomes the domain's request; zero values of unsupported fields are fine."""
        request = inputs.create_request(_request({"hostname": "web", "tags": ["a"], "cpus": 0, "userdata": ""}))
        self.assertEqual(request, CreateRequest(hostname="web", tags=("a",)))
        self.assertEqual(inputs.create_request(_request()), CreateRequest())

    def test_create_refusals(self) -> None:
        """Unsupported values, negative sizes, empty tags, wrong types and unknown fields are 400s with codes."""
        cases = [
            ({"userdata": "echo"}, "not_supported"),
            ({"gpu_count": 1}, "limit_exceeded"),
            ({"ram_bytes": -1}, "invalid_body"),
            ({"tags": [""]}, "invalid_body"),
            ({"cpus": "2"}, "invalid_body"),
            ({"colour": "red"}, "invalid_body"),
            (b"[1]", "invalid_body"),
            (b"{", "invalid_json"),
        ]
        for body, code in cases:
            error = self.assertRaises(BadRequest, inputs.create_request, _request(body))
            self.assertEqual(error.code, code, body)

    def test_mkdir(self) -> None:
        """mkdir's body: a guest path, recursive, an octal mode (0755 when empty)."""
        self.assertEqual(inputs.fs_mkdir_request(_request({"path": "/srv/a"})), ("/srv/a", False, 0o755))
        self.assertEqual(inputs.fs_mkdir_request(_request({"path": "~/a", "recursive": True, "mode": "0700"})),
                         ("~/a", True, 0o700))
        self.assertEqual(self.assertRaises(BadRequest, inputs.fs_mkdir_request, _request({"path": "a"})).code,
                         "invalid_path")
        self.assertEqual(self.assertRaises(BadRequest, inputs.fs_mkdir_request,
                                           _request({"path": "/a", "mode": "rwx"})).code, "invalid_mode")


class ChoiceTests(SynchronousTestCase):
    def test_wait(self) -> None:
        """wait=agent waits for the agent, absent waits for nothing, userdata is not supported yet."""
        self.assertEqual((inputs.wait("agent"), inputs.wait(None)), (Wait.AGENT, Wait.NONE))
        self.assertEqual(self.assertRaises(BadRequest, inputs.wait, "userdata").code, "not_supported")

    def test_shutdown_action(self) -> None:
        """The query's action wins over the body's; reboot is the default; others are refused."""
        self.assertIs(inputs.shutdown_action(_request({"action": "reboot"}), "shutdown"), Op.SHUTDOWN)
        self.assertIs(inputs.shutdown_action(_request({"action": "shutdown"}), None), Op.SHUTDOWN)
        self.assertIs(inputs.shutdown_action(_request(), None), Op.REBOOT)
        for body in ({"action": "halt"}, {"action": 3}):
            self.assertEqual(self.assertRaises(BadRequest, inputs.shutdown_action, _request(body), None).code,
                             "invalid_action")

    def test_cp_mode(self) -> None:
        """The mode parameter wins; else tar when the header names only the tar media type."""
        tar = {b"content-type": b"application/x-tar"}
        self.assertEqual(inputs.cp_mode(_request(headers=tar), "binary", b"content-type"), "binary")
        self.assertEqual(inputs.cp_mode(_request(headers=tar), None, b"content-type"), "tar")
        both = {b"accept": b"application/octet-stream, application/x-tar"}
        self.assertEqual(inputs.cp_mode(_request(headers=both), None, b"accept"), "binary")
        self.assertEqual(inputs.cp_mode(_request(), None, b"accept"), "binary")
