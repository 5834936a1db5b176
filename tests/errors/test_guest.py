# -*- test-case-name: tests.errors.test_guest -*-
"""Tests for :mod:`vmservice.errors.guest`: the guest's errors and the service error each kind is."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice import errors


class GuestErrorTests(SynchronousTestCase):
    def test_every_kind_has_a_service_error(self) -> None:
        """The table covers every guest error kind, so no agent error becomes an anonymous 500."""
        self.assertEqual(set(errors.GUEST_ERRORS), set(errors.GuestErrorKind))

    def test_mapped_at_the_edge(self) -> None:
        """An agent error is rendered through the table, with its own message."""
        cases = [
            (errors.GuestErrorKind.UNAVAILABLE, 503, "agent_unavailable"),
            (errors.GuestErrorKind.NOT_FOUND, 404, "not_found"),
            (errors.GuestErrorKind.NOT_EMPTY, 409, "directory_not_empty"),
            (errors.GuestErrorKind.PERMISSION_DENIED, 403, "permission_denied"),
            (errors.GuestErrorKind.UNSUPPORTED, 501, "not_supported"),
            (errors.GuestErrorKind.REJECTED, 400, "invalid_exec"),
            (errors.GuestErrorKind.NO_SPACE, 507, "insufficient_storage"),
            (errors.GuestErrorKind.MISSING_DESTINATION, 400, "missing_destination"),
            (errors.GuestErrorKind.OVER_BUDGET, 503, "buffer_budget_exhausted"),
        ]
        for kind, status, code in cases:
            self.assertEqual(errors.http_error(errors.AgentError(kind, "m")), (status, {"error": "m", "code": code}))

    def test_guest_names(self) -> None:
        """A guest's error name becomes its kind; names the daemon does not know are fs_error."""
        self.assertIs(errors.GuestErrorKind.of_guest("not_found"), errors.GuestErrorKind.NOT_FOUND)
        self.assertIs(errors.GuestErrorKind.of_guest("no_space"), errors.GuestErrorKind.NO_SPACE)
        self.assertIs(errors.GuestErrorKind.of_guest("unavailable"), errors.GuestErrorKind.FS_ERROR)
        self.assertIs(errors.GuestErrorKind.of_guest(None), errors.GuestErrorKind.FS_ERROR)
