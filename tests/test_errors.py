"""Tests for the one mapping of errors to HTTP (:mod:`vmservice.errors`)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice import errors


class MappingTests(SynchronousTestCase):
    def test_statuses(self) -> None:
        """Each domain error maps to its status and a snake_case code."""
        cases = [
            (errors.BadRequest("x"), 400, "bad_request"),
            (errors.Unauthorized("x"), 401, "unauthorized"),
            (errors.Protected("x"), 403, "protected"),
            (errors.NotFound("x"), 404, "not_found"),
            (errors.MethodNotAllowed("x"), 405, "method_not_allowed"),
            (errors.WaitTimeout("x"), 408, "wait_timeout"),
            (errors.Conflict("x"), 409, "conflict"),
            (errors.Internal("x"), 500, "internal_error"),
            (errors.NotSupported("x"), 501, "not_supported"),
            (errors.AgentNotConnected("x"), 503, "agent_unavailable"),
        ]
        for error, status, code in cases:
            self.assertEqual(errors.http_error(error), (status, {"error": "x", "code": code}))

    def test_specific_code(self) -> None:
        """A raise site may give a more specific code."""
        self.assertEqual(errors.http_error(errors.NotFound("gone", code="node_not_found"))[1]["code"], "node_not_found")

    def test_unknown_exception(self) -> None:
        """Anything else is a 500 that says nothing of the internals."""
        self.assertEqual(errors.http_error(ValueError("secret detail")), (500, {"error": "internal error", "code": "internal_error"}))
