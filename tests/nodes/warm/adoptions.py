"""
Clone adoptions that record what they are asked (each providing
:class:`~vmservice.nodes.warm.adoption.ICloneAdoption`), for the tests of clones made from a template
(:class:`FakeAdoption`) and of forks (:class:`RecordingAdoption`).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from tests.fakes import FleetHarness
from vmservice.hypervisors.base import NetSpec
from vmservice.nodes.warm.adoption import ICloneAdoption
from vmservice.guestport.guest import IGuestConnection
from vmservice.nodes.model import NodeRecord


@implementer(ICloneAdoption)
class FakeAdoption:
    """Records each adoption and what the clone's agent had been asked before it."""

    def __init__(self, harness: FleetHarness) -> None:
        self.harness = harness
        self.adopted: list[tuple[str, list[str], list[str]]] = []
        self.prepared: list[IGuestConnection] = []
        self.fail: Exception | None = None
        #: The names of the spares that rehearsed, with the commands their VM had been given by then.
        self.rehearsed: list[tuple[str, list[str]]] = []
        #: Rehearsals fail with this when set.
        self.fail_rehearsal: Exception | None = None

    def prepare(self, agent: IGuestConnection) -> Deferred[None]:
        self.prepared.append(agent)
        return succeed(None)

    def adopt(self, record: NodeRecord, net: NetSpec | None, agent: IGuestConnection) -> Deferred[None]:
        machine = self.harness.driver.machines[-1]
        requests = [header["op"] for header, _ in self.harness.agents[-1].requests]
        self.adopted.append((record.hostname, list(machine.commands), requests))
        if self.fail is not None:
            raise self.fail
        return succeed(None)

    def rehearse(self, name: str, agent: IGuestConnection) -> Deferred[None]:
        self.rehearsed.append((name, list(self.harness.driver.machines[-1].commands)))
        if self.fail_rehearsal is not None:
            raise self.fail_rehearsal
        return succeed(None)


@implementer(ICloneAdoption)
class RecordingAdoption:
    """Records each adoption with the commands its VM had been given by then."""

    def __init__(self, harness: FleetHarness) -> None:
        self.harness = harness
        self.adopted: list[tuple[str, list[str], bool]] = []
        self.fail_for: str | None = None
        #: For each preparation, the commands the parent's VM had been given by then.
        self.prepared: list[list[str]] = []

    def prepare(self, agent: IGuestConnection) -> Deferred[None]:
        self.prepared.append(list(self.harness.driver.machines[0].commands))
        return succeed(None)

    def adopt(self, record: NodeRecord, net: NetSpec | None, agent: IGuestConnection) -> Deferred[None]:
        machine = self.harness.driver.machines[-1]
        self.adopted.append((record.hostname, list(machine.commands), net is not None))
        if record.hostname == self.fail_for:
            raise RuntimeError("the guest said no")
        return succeed(None)

    def rehearse(self, name: str, agent: IGuestConnection) -> Deferred[None]:
        return succeed(None)
