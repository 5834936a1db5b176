# -*- test-case-name: tests.client.test_secrets -*-
"""
Tests for :mod:`vmservice.client.secrets` without a server.  The calls
against the API app served on loopback are tested in
:mod:`tests.integration.test_client`.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice import secretstore
from vmservice.client.secrets import MAX_SECRET_SIZE


class LimitTests(SynchronousTestCase):
    def test_size_as_the_daemon_has_it(self) -> None:
        """
        The client's bound on a secret's content is the store's (its own copy:
        the client shares nothing with the daemon's layers), so vmctl refuses
        what the daemon would, before sending it.
        """
        self.assertEqual(MAX_SECRET_SIZE, secretstore.MAX_SECRET_SIZE)
