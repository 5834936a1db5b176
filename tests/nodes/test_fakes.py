"""The fakes of ``tests/fakes.py`` provide the interfaces they stand in for."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyClass, verifyObject

from tests.fakes import FakeAgent, FakeDisks, FakeDriver, FakeMachine, FakeNetwork
from vmservice.hypervisors.base import IHypervisor, IMachine, MachineSpec
from vmservice.network.host import HostNetwork
from vmservice.network.interfaces import INodeNetwork
from vmservice.guestport.guest import IGuest, IGuestConnection
from vmservice.storage.interfaces import IDisks
from vmservice.storage.overlay import OverlayDisks


class FakesTests(SynchronousTestCase):
    def test_fakes_provide_their_interfaces(self) -> None:
        """Each fake has every method and attribute of its interface, with compatible signatures."""
        spec = MachineSpec("a", 1, 1, "k", "i", "d", "agent.sock", "qmp.sock", "console.log")
        verifyObject(IMachine, FakeMachine(spec, 1))
        verifyObject(IHypervisor, FakeDriver())
        verifyObject(IGuestConnection, FakeAgent("agent.sock"))
        verifyObject(IGuest, FakeAgent("agent.sock"))
        verifyObject(INodeNetwork, FakeNetwork())
        verifyObject(IDisks, FakeDisks())

    def test_real_parts_provide_them_too(self) -> None:
        """The real network and disks provide the same interfaces the fakes stand in for."""
        verifyClass(INodeNetwork, HostNetwork)
        verifyClass(IDisks, OverlayDisks)
