# -*- test-case-name: tests.guestport.test_identity -*-
"""Tests for :mod:`vmservice.guestport.identity`."""

from __future__ import annotations

import itertools

from attrs.exceptions import FrozenInstanceError
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyClass, verifyObject

from vmservice.agent.client import AgentClient
from vmservice.guestport.identity import ENTROPY_SIZE, GuestIdentity, GuestNet, IAdoption, new_identity


class NewIdentityTests(SynchronousTestCase):
    """new_identity."""

    def test_fields(self) -> None:
        """
        The machine-id is a version 4 UUID's 32 lowercase hex digits, the entropy
        64 bytes, both from ``urandom``; the rest as given.
        """
        counter = itertools.count()
        drawn: list[int] = []

        def urandom(size: int) -> bytes:
            drawn.append(size)
            return bytes(next(counter) % 256 for _ in range(size))

        net = GuestNet("52:54:00:0a:00:05", "10.0.0.5/24", "10.0.0.1")
        identity = new_identity("node-1", net, 1_700_000_000_000_000_000, urandom)
        self.assertEqual(drawn, [16, ENTROPY_SIZE])
        # Bytes 0 to 15 with the version (byte 6) and variant (byte 8) bits set.
        self.assertEqual(identity.machine_id, "000102030405460788090a0b0c0d0e0f")
        self.assertEqual(identity.entropy, bytes(range(16, 16 + ENTROPY_SIZE)))
        self.assertEqual((identity.hostname, identity.net, identity.wall_clock_ns),
                         ("node-1", net, 1_700_000_000_000_000_000))
        with self.assertRaises(FrozenInstanceError):
            identity.hostname = "other"  # type: ignore[misc]

    def test_random(self) -> None:
        """Two identities differ in machine-id and entropy."""
        first, second = (new_identity("n", None, 1) for _ in range(2))
        self.assertNotEqual(first.machine_id, second.machine_id)
        self.assertNotEqual(first.entropy, second.entropy)
        self.assertRegex(first.machine_id, r"\A[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}\Z")
        self.assertIsInstance(first, GuestIdentity)


class AdoptionProviderTests(SynchronousTestCase):
    """The agent connection adopts."""

    def test_agent_client(self) -> None:
        """AgentClient provides IAdoption."""
        self.assertTrue(verifyClass(IAdoption, AgentClient))
        self.assertTrue(verifyObject(IAdoption, AgentClient(MemoryReactorClock(), "/run/agent.sock")))
