"""Tests for :mod:`vmservice.api.inputs.filesystem`: the body of an fs mkdir."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.api.inputs.requests import dummy_request
from vmservice.api.inputs.filesystem import fs_mkdir_request
from vmservice.errors import BadRequest


class MkdirTests(SynchronousTestCase):
    def test_mkdir(self) -> None:
        """mkdir's body: a guest path, recursive, an octal mode (0755 when empty)."""
        self.assertEqual(fs_mkdir_request(dummy_request({"path": "/srv/a"})), ("/srv/a", False, 0o755))
        self.assertEqual(fs_mkdir_request(dummy_request({"path": "~/a", "recursive": True, "mode": "0700"})),
                         ("~/a", True, 0o700))
        self.assertEqual(self.assertRaises(BadRequest, fs_mkdir_request, dummy_request({"path": "a"})).code,
                         "invalid_path")
        self.assertEqual(self.assertRaises(BadRequest, fs_mkdir_request,
                                           dummy_request({"path": "/a", "mode": "rwx"})).code, "invalid_mode")
