"""
Tests for :mod:`vmservice.cluster.fleet_pods`: the provider over a fleet
(a fake with the fleet's calls and its event hub) and a secrets store.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, cast

import attrs
from twisted.internet.defer import Deferred, succeed
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster.pod_harness import CONFIG, GROUPS, pod
from vmservice.cluster.fleet_pods import FleetPods, failure_reason
from vmservice.cluster.pod_naming import pod_tags
from vmservice.cluster.pod_object import PodKey
from vmservice.cluster.pod_provider import VmPhase
from vmservice.cluster.pod_spec import parse_spec
from vmservice.errors import InsufficientMemory, NotFound, WaitTimeout
from vmservice.nodes.events import EventHub, EventType
from vmservice.nodes.model import CreateRequest, NodeRecord, Status, Wait
from vmservice.secretstore import SecretStore


class FakeLifecycle:
    def __init__(self, fleet: "FakeFleet") -> None:
        self.fleet, self.shutdowns = fleet, list[str]()

    def shutdown(self, hostname: str, op: Any) -> Deferred[None]:
        self.shutdowns.append(hostname)
        return succeed(None)


class FakeFleet:
    """The fleet's calls FleetPods makes, over records in memory."""

    def __init__(self) -> None:
        self.events = EventHub(lambda: 0.0)
        self.records: dict[str, NodeRecord] = {}
        self.lifecycle = FakeLifecycle(self)
        self.requests: list[tuple[str, CreateRequest, Wait, float]] = []
        self.refuse: Exception | None = None

    def list(self, group: str | None = None, tag: str | None = None, tag_prefix: str | None = None) -> list[NodeRecord]:
        return [r for r in self.records.values() if (tag is None or tag in r.tags) and
                (tag_prefix is None or any(t.startswith(tag_prefix) for t in r.tags))]

    def node(self, hostname: str) -> NodeRecord:
        if hostname not in self.records:
            raise NotFound(hostname)
        return self.records[hostname]

    def group(self, name: str) -> Any:
        return GROUPS[name]

    def create(self, group: str, request: CreateRequest, wait: Wait, timeout: float) -> Deferred[NodeRecord]:
        self.requests.append((group, request, wait, timeout))
        if self.refuse is not None:
            raise self.refuse
        assert request.hostname is not None
        record = NodeRecord(hostname=request.hostname, hostgroup=group, ram_bytes=1, cpus=1,
                            created_at=datetime(2026, 1, 1, tzinfo=timezone.utc), status=Status.RUNNING,
                            ip="10.240.0.9", tags=request.tags)
        self.records[record.hostname] = record
        return succeed(record)

    def delete(self, group: str, hostname: str) -> Deferred[None]:
        record = self.records.pop(hostname)
        self.events.publish(EventType.DELETED, record)
        return succeed(None)


class FleetPodsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = MemoryReactorClock()
        self.fleet = FakeFleet()
        self.store = SecretStore(self.mktemp(), self.clock)
        self.pods = FleetPods(self.clock, cast(Any, self.fleet), self.store, "vms-a", 120.0)
        self.told: list[str] = []
        self.pods.notify(self.told.append)
        self.spec = parse_spec(pod(), GROUPS, CONFIG)

    def test_create(self) -> None:
        """A tagged node of the group, wait=agent; its environment a secret read by its userdata."""
        state = self.successResultOf(self.pods.create(self.spec, (("A", "1"),)))
        self.assertEqual((state.phase, state.hostname, state.ip), (VmPhase.RUNNING, "web", "10.240.0.9"))
        [(group, request, wait, timeout)] = self.fleet.requests
        self.assertEqual((group, wait, timeout), ("vm", Wait.AGENT, 120.0))
        self.assertEqual(request.tags, pod_tags(self.spec.key, "vms-a"))
        self.assertEqual(request.secrets, ("pod-uid-web.env",))
        self.assertIn(". /run/secrets/pod-uid-web.env", request.userdata)
        self.assertEqual(self.store.get("pod-uid-web.env").data, b"export A='1'\n")
        [vm] = self.pods.vms()
        self.assertEqual((vm.key, vm.state.phase), (self.spec.key, VmPhase.RUNNING))
        self.assertEqual(self.pods.hostname(self.spec.key), "web")

    def test_events(self) -> None:
        """Agent down: booting; the controller is told the pod's uid."""
        self.successResultOf(self.pods.create(self.spec, ()))
        self.fleet.events.publish(EventType.AGENT_DOWN, self.fleet.records["web"])
        self.assertEqual(self.pods.state(self.spec.key).phase, VmPhase.BOOTING)
        self.assertEqual(self.told, ["uid-web"])
        self.fleet.records["web"] = attrs.evolve(self.fleet.records["web"], status=Status.STOPPED)
        self.assertEqual(self.pods.state(self.spec.key).reason, "VmStopped")

    def test_refused(self) -> None:
        """A domain error is a failed state with its reason; the environment secret is removed."""
        self.fleet.refuse = InsufficientMemory("no room")
        state = self.successResultOf(self.pods.create(self.spec, (("A", "1"),)))
        self.assertEqual((state.phase, state.reason), (VmPhase.FAILED, "InsufficientMemory"))
        self.assertEqual(self.store.list(), [])
        self.assertEqual(failure_reason(WaitTimeout("slow"))[0], "BootTimeout")

    def test_hostname_taken(self) -> None:
        self.successResultOf(self.pods.create(self.spec, ()))
        other = parse_spec(pod(uid="abcdef12-0"), GROUPS, CONFIG)
        self.assertEqual(self.successResultOf(self.pods.create(other, ())).hostname, "web-abcde")

    def test_delete_graceful(self) -> None:
        """A running VM is asked to power off, waited for within the grace, then deleted with its secret."""
        self.successResultOf(self.pods.create(self.spec, (("A", "1"),)))
        deleting = self.pods.delete(self.spec.key, 5)
        self.assertNoResult(deleting)
        self.assertEqual(self.fleet.lifecycle.shutdowns, ["web"])
        self.clock.advance(5)
        self.successResultOf(deleting)
        self.assertEqual((self.fleet.records, self.store.list()), ({}, []))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_sweep(self) -> None:
        """Environment secrets of pods without a VM are removed."""
        self.successResultOf(self.pods.create(self.spec, (("A", "1"),)))
        self.successResultOf(self.pods.create(parse_spec(pod("b"), GROUPS, CONFIG), (("B", "2"),)))
        del self.fleet.records["b"]
        self.pods.sweep()
        self.assertEqual([meta.name for meta in self.store.list()], ["pod-uid-web.env"])

    def test_other_node(self) -> None:
        """VMs tagged for another Node are not this one's."""
        self.successResultOf(self.pods.create(self.spec, ()))
        self.fleet.records["web"] = attrs.evolve(self.fleet.records["web"],
                                                 tags=pod_tags(PodKey("default", "web", "uid-web"), "vms-b"))
        self.assertEqual(self.pods.vms(), [])
