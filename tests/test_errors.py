"""Tests for the one mapping of errors to HTTP (:mod:`vmservice.errors`)."""

from __future__ import annotations

import errno

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

    def test_unknown_exception(self) -> None:
        """Anything else is a 500 that says nothing of the internals."""
        self.assertEqual(errors.http_error(ValueError("secret detail")), (500, {"error": "internal error", "code": "internal_error"}))


class NoRoomTests(SynchronousTestCase):
    def test_errnos(self) -> None:
        """An OSError of a full file system (ENOSPC) or of a quota (EDQUOT) is one of no room; others are not."""
        self.assertTrue(errors.no_room(OSError(errno.ENOSPC, "No space left on device")))
        self.assertTrue(errors.no_room(OSError(errno.EDQUOT, "Disk quota exceeded")))
        self.assertFalse(errors.no_room(OSError(errno.EIO, "Input/output error")))
        self.assertFalse(errors.no_room(FileNotFoundError(errno.ENOENT, "No such file or directory")))

    def test_words_of_a_child_process(self) -> None:
        """A child process's message (qemu-img's, QEMU's) naming the system's words for no room is one too."""
        self.assertTrue(errors.no_room(RuntimeError(
            "qemu-img failed (1): qemu-img: /s/nodes/demo-1/disk.qcow2: Could not create: No space left on device")))
        self.assertTrue(errors.no_room(RuntimeError("saving the VM state failed: Disk quota exceeded")))
        self.assertFalse(errors.no_room(RuntimeError("saving the VM state failed: Broken pipe")))

    def test_cause(self) -> None:
        """An error raised from one of no room is one too; one merely raised while handling it is not."""
        try:
            try:
                raise OSError(errno.ENOSPC, "full")
            except OSError as error:
                raise errors.Internal("the write failed") from error
        except errors.Internal as raised:
            self.assertTrue(errors.no_room(raised))
        try:
            try:
                raise OSError(errno.ENOSPC, "full")
            except OSError:
                raise ValueError("unrelated")
        except ValueError as raised:
            self.assertFalse(errors.no_room(raised))


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
