"""
Tests for :mod:`vmservice.listening`: the private attribute of Twisted's
StreamServerEndpointService still makes a failed listen raise at start.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IProtocolFactory, IStreamServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from vmservice.listening import RAISE_ATTRIBUTE, listening_service


@implementer(IStreamServerEndpoint)
class _Refusing:
    """An endpoint whose port is taken."""

    def listen(self, factory: IProtocolFactory) -> Deferred[object]:
        return fail(CannotListenError("127.0.0.1", 8080, OSError("in use")))


class ListeningTests(SynchronousTestCase):
    def test_attribute_exists(self) -> None:
        """Twisted's service still has the attribute (if this fails, Twisted changed it)."""
        service = listening_service(_Refusing(), Factory.forProtocol(Protocol))
        self.assertIs(getattr(service, RAISE_ATTRIBUTE), True)

    def test_failed_listen_raises_at_start(self) -> None:
        """A port that cannot be listened on fails startService itself, so the daemon does not run without an API."""
        service = listening_service(_Refusing(), Factory.forProtocol(Protocol))
        self.assertRaises(CannotListenError, service.startService)
