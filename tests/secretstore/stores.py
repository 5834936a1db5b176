"""
What the tests of :mod:`vmservice.secretstore` share: :class:`StoreCase`, a
store in the test's own state directory on a clock, its changes heard, and
:data:`CONTENT`, a secret's content that no error may carry.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vmservice.errors import ServiceError
from vmservice.secretstore import SecretStore

CONTENT = b"hunter2-the-content"


class StoreCase(SynchronousTestCase):
    """A store in the test's own state directory; ``changed``: the names its subscriber heard of."""

    def setUp(self) -> None:
        self.state_dir = self.mktemp()
        os.makedirs(self.state_dir)
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.store = SecretStore(self.state_dir, self.clock)
        self.changed: list[str] = []
        self.store.subscribe(self.changed.append)

    def error(self, kind: type[ServiceError], call: Any, *args: Any) -> ServiceError:
        """The error ``call(*args)`` raises, checked to say nothing of the content."""
        error = self.assertRaises(kind, call, *args)
        self.assertNotIn("hunter2", str(error))
        return error
