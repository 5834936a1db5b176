"""Tests for :mod:`vmservice.cluster.kubelet.status`: the Status bodies kubectl reads."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from vmservice.cluster.kubelet import status
from vmservice.errors import NotFound


class StatusTests(SynchronousTestCase):
    def test_failure(self) -> None:
        """A failure is a v1 Status with its code, reason and message."""
        body = json.loads(status.failure(404, "pod \"x\" not found"))
        self.assertEqual(body, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": "pod \"x\" not found", "reason": "NotFound", "code": 404})

    def test_from_error(self) -> None:
        """A service error becomes its HTTP status and a Status of it."""
        code, body = status.from_error(NotFound("no such VM"))
        self.assertEqual((code, json.loads(body)["reason"], json.loads(body)["message"]),
                         (404, "NotFound", "no such VM"))

    def test_unknown_code(self) -> None:
        """A status without a reason of its own is an InternalError."""
        self.assertEqual(json.loads(status.failure(418, "teapot"))["reason"], "InternalError")

    def test_exec_success(self) -> None:
        """An exit 0 is a Success Status."""
        self.assertEqual(json.loads(status.exec_success())["status"], "Success")

    def test_exec_exit(self) -> None:
        """A non-zero exit is a Failure with reason NonZeroExitCode and one ExitCode cause holding the code."""
        body = json.loads(status.exec_exit(3, "command terminated with non-zero exit code: exit code 3"))
        self.assertEqual(body["status"], "Failure")
        self.assertEqual(body["reason"], "NonZeroExitCode")
        self.assertEqual(body["details"], {"causes": [{"reason": "ExitCode", "message": "3"}]})

    def test_exec_error(self) -> None:
        """A lost exec is an InternalError without an exit code."""
        body = json.loads(status.exec_error("the agent went away"))
        self.assertEqual((body["reason"], body["code"]), ("InternalError", 500))
        self.assertNotIn("details", body)
