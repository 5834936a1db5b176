"""Tests for :mod:`vmservice.e2b.host`: what the sandboxes ask of the fleet, and how :class:`FleetHost` asks it."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable, cast

import attrs

from twisted.internet.defer import Deferred, succeed

from twisted.trial.unittest import SynchronousTestCase

from tests.e2b.hosts import snapshot
from vmservice.config import HostGroupConfig
from vmservice.e2b.host import BOOT_TIMEOUT, SANDBOX_TAG, FleetHost, is_paused
from vmservice.nodes.events import EventType, NodeEvent
from vmservice.nodes.fleet import Fleet
from vmservice.nodes.model import CreateRequest, NodeRecord, Status, Wait
from vmservice.nodes.stats import NodeStat

RECORD = NodeRecord("iabcdefghij012345678", "e2b", 256 << 20, 1, datetime(2026, 1, 1, tzinfo=timezone.utc),
                    status=Status.RUNNING)


class _Part:
    """A part of the stand-in fleet: each call noted in the fleet's ``calls``."""

    def __init__(self, calls: list[tuple[Any, ...]]) -> None:
        self.calls = calls

    async def suspend(self, hostname: str) -> None:
        self.calls.append(("suspend", hostname))

    async def restore(self, hostname: str, wait: Wait, timeout: float) -> None:
        self.calls.append(("restore", hostname, wait, timeout))

    async def one(self, hostname: str) -> NodeStat:
        return NodeStat(RECORD, snapshot=snapshot(hostname))

    def listen(self, listener: Callable[[NodeEvent], None]) -> Callable[[], None]:
        self.calls.append(("listen", listener))
        return lambda: None


class StandInFleet:
    """What FleetHost calls of a fleet, noted."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.snapshots = self.stats = self.events = _Part(self.calls)

    def recovered(self) -> Deferred[None]:
        return succeed(None)

    def node(self, hostname: str) -> NodeRecord:
        return RECORD

    def group(self, name: str) -> HostGroupConfig:
        return HostGroupConfig(name=name, storage_size=3 << 30)

    async def create(self, group: str, request: CreateRequest, wait: Wait, timeout: float) -> NodeRecord:
        self.calls.append(("create", group, request, wait, timeout))
        return RECORD

    async def delete(self, group: str, hostname: str) -> None:
        self.calls.append(("delete", group, hostname))


class FleetHostTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.fleet = StandInFleet()
        self.host = FleetHost(cast(Fleet, self.fleet))

    def test_calls(self) -> None:
        """A create names the node by the id, tags it and waits for its agent; the others map one to one."""
        self.assertEqual(self.successResultOf(Deferred.fromCoroutine(self.host.create("e2b", RECORD.hostname))),
                         RECORD)
        for step in (self.host.delete("e2b", "x"), self.host.suspend("x"), self.host.restore("x")):
            self.successResultOf(Deferred.fromCoroutine(step))
        self.assertEqual(self.fleet.calls, [
            ("create", "e2b", CreateRequest(hostname=RECORD.hostname, tags=(SANDBOX_TAG,)), Wait.AGENT, BOOT_TIMEOUT),
            ("delete", "e2b", "x"), ("suspend", "x"), ("restore", "x", Wait.AGENT, BOOT_TIMEOUT)])
        self.assertEqual(self.host.disk_bytes("e2b"), 3 << 30)
        self.assertEqual(self.successResultOf(Deferred.fromCoroutine(self.host.snapshot("x"))), snapshot("x"))
        self.assertEqual(self.host.node("x"), RECORD)
        self.successResultOf(self.host.recovered())

    def test_deleted(self) -> None:
        """Only deletions are told, by hostname."""
        heard: list[str] = []
        self.host.on_deleted(heard.append)
        listener = self.fleet.calls[0][1]
        for kind in (EventType.SUSPENDED, EventType.DELETED):
            listener(NodeEvent(1, 0.0, kind, "x", "e2b", "Running"))
        self.assertEqual(heard, ["x"])

    def test_paused(self) -> None:
        """Paused is suspended to disk (a node paused in memory, or asleep by the idle timer, counts as running)."""
        self.assertEqual([is_paused(RECORD.with_status(s)) for s in (Status.SUSPENDED, Status.PAUSED, Status.RUNNING)],
                         [True, False, False])
        self.assertFalse(is_paused(attrs.evolve(RECORD, status=Status.SUSPENDED, idle_suspended=True)))
