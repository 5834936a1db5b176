# -*- test-case-name: tests.test_auth -*-
"""Tests for :mod:`vmservice.auth`."""

from __future__ import annotations

import os
import stat

from twisted.trial.unittest import SynchronousTestCase

from vmservice.auth import bearer_matches, load_or_create_token, token_path


class TokenTests(SynchronousTestCase):
    def test_created_once_with_tight_modes(self) -> None:
        """The token is made at first use (dir 0700, file 0600, ≥32 bytes of entropy) and reused."""
        state = self.mktemp()
        token = load_or_create_token(state)
        self.assertGreaterEqual(len(token), 43)
        self.assertEqual(load_or_create_token(state), token)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(token_path(state))).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(token_path(state)).st_mode), 0o600)
        self.assertNotEqual(load_or_create_token(self.mktemp()), token)

    def test_modes_tightened(self) -> None:
        """An existing token file with loose permissions is tightened to 0600."""
        state = self.mktemp()
        load_or_create_token(state)
        os.chmod(token_path(state), 0o644)
        load_or_create_token(state)
        self.assertEqual(stat.S_IMODE(os.stat(token_path(state)).st_mode), 0o600)

    def test_bearer(self) -> None:
        """Only 'Bearer <token>' (scheme case-insensitive) matches."""
        self.assertTrue(bearer_matches(b"Bearer abc", "abc"))
        self.assertTrue(bearer_matches(b"bearer abc", "abc"))
        for header in (None, b"", b"Bearer", b"Bearer ", b"Bearer abd", b"Basic abc", b"abc"):
            self.assertFalse(bearer_matches(header, "abc"), header)
