"""Tests of :mod:`vmservice.e2b.envd_failures`: the domain's errors as Connect's."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice.e2b.connect import Code, ConnectError
from vmservice.e2b.envd_failures import connect_error_of
from vmservice.errors import AgentError, BadRequest, Conflict, GuestErrorKind, NotFound


class FailureTests(SynchronousTestCase):
    def test_guest_kinds(self) -> None:
        """A guest's error by its kind, its message kept; an unlisted kind is ``internal``."""
        for kind, code in ((GuestErrorKind.NOT_FOUND, Code.NOT_FOUND), (GuestErrorKind.EXISTS, Code.ALREADY_EXISTS),
                           (GuestErrorKind.PERMISSION_DENIED, Code.PERMISSION_DENIED),
                           (GuestErrorKind.UNAVAILABLE, Code.UNAVAILABLE), (GuestErrorKind.MALFORMED, Code.INTERNAL)):
            error = connect_error_of(AgentError(kind, "said"))
            self.assertEqual((error.code, error.message), (code, "said"))

    def test_service_errors(self) -> None:
        """A service error by its status."""
        self.assertEqual(connect_error_of(NotFound("x")).code, Code.NOT_FOUND)
        self.assertEqual(connect_error_of(BadRequest("x")).code, Code.INVALID_ARGUMENT)
        self.assertEqual(connect_error_of(Conflict("x")).code, Code.ALREADY_EXISTS)

    def test_others(self) -> None:
        """A Connect error stays itself; anything else is ``internal`` without its text."""
        error = ConnectError(Code.ABORTED, "a")
        self.assertIs(connect_error_of(error), error)
        self.assertEqual(connect_error_of(ValueError("secret")).as_json(), {"code": "internal",
                                                                            "message": "internal error"})
