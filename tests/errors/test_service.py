# -*- test-case-name: tests.errors.test_service -*-
"""Tests for :mod:`vmservice.errors.service`: each domain error's status and code."""

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
            (errors.BufferBudgetExhausted("x"), 503, "buffer_budget_exhausted"),
            (errors.ConnectionLimitReached("x"), 503, "connection_limit_reached"),
            (errors.TooManyConnections("x"), 429, "too_many_connections"),
            (errors.InsufficientStorage("x"), 507, "insufficient_storage"),
            (errors.StateDirFull("x"), 507, "state_dir_full"),
        ]
        for error, status, code in cases:
            self.assertEqual(errors.http_error(error), (status, {"error": "x", "code": code}))

    def test_specific_code(self) -> None:
        """A raise site may give a more specific code."""
        self.assertEqual(errors.http_error(errors.NotFound("gone", code="node_not_found"))[1]["code"], "node_not_found")
