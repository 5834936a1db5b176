# -*- test-case-name: tests.nodes.test_events -*-
"""
Tests of :mod:`vmservice.nodes.events`: the status table, the hub's ids,
times, ring, gaps, filters and subscribers (pause, resume, cancel), and the
events a fleet on fakes publishes through its lifecycle.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from tests.nodes.fleet_case import LifecycleTestCase
from vmservice.nodes.events import (
    DELETED,
    EventFilter,
    EventHub,
    EventType,
    IEventSink,
    NodeEvent,
    Subscription,
    status_event,
)
from vmservice.nodes.model import NodeRecord, Status, Wait
from vmservice.nodes.transitions import Op


def record(hostname: str = "demo-1", group: str = "demo", status: Status = Status.RUNNING,
           tags: tuple[str, ...] = ()) -> NodeRecord:
    return NodeRecord(hostname=hostname, hostgroup=group, ram_bytes=1, cpus=1,
                      created_at=datetime(2024, 1, 1, tzinfo=timezone.utc), status=status, tags=tags)


@implementer(IEventSink)
class Sink:
    """Records what a subscription delivers: events by id, gaps as ``("gap", last, oldest)``."""

    def __init__(self) -> None:
        self.got: list[Any] = []
        self.subscription: Subscription | None = None
        self.pause_after: int | None = None

    def event(self, event: NodeEvent) -> None:
        self.got.append(event.id)
        if self.pause_after is not None and len(self.got) >= self.pause_after and self.subscription is not None:
            self.subscription.pauseProducing()

    def gap(self, last_id: int, oldest_id: int) -> None:
        self.got.append(("gap", last_id, oldest_id))


class StatusEventTests(SynchronousTestCase):
    def test_table(self) -> None:
        """Each visible change is its event; internal statuses and failed suspends or restores are none."""
        S, E = Status, EventType
        cases = {
            (S.CREATING, S.RUNNING): E.RUNNING,
            (S.RUNNING, S.PAUSED): E.PAUSED,
            (S.PAUSED, S.RUNNING): E.RESUMED,
            (S.SUSPENDING, S.SUSPENDED): E.SUSPENDED,
            (S.RESTORING, S.RUNNING): E.RESTORED,
            (S.SUSPENDED, S.RUNNING): E.RUNNING,  # a relaunch
            (S.STOPPED, S.RUNNING): E.RUNNING,
            (S.RUNNING, S.STOPPED): E.STOPPED,
            (S.STOPPING, S.STOPPED): E.STOPPED,
            (S.SUSPENDING, S.RUNNING): None,
            (S.SUSPENDING, S.PAUSED): None,
            (S.RESTORING, S.SUSPENDED): None,
            (S.RUNNING, S.SUSPENDING): None,
            (S.RUNNING, S.STOPPING): None,
            (S.RUNNING, S.DELETING): None,
            (S.SUSPENDED, S.RESTORING): None,
            (S.RUNNING, S.RUNNING): None,
        }
        for (before, after), expected in cases.items():
            self.assertIs(status_event(before, after), expected, (before, after))


class HubTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.hub = EventHub(self.clock.seconds, size=4)

    def publish(self, n: int = 1, **fields: Any) -> list[NodeEvent]:
        return [self.hub.publish(EventType.PAUSED, record(**fields)) for _ in range(n)]

    def subscribe(self, last_id: int | None = None, where: EventFilter = EventFilter()) -> Sink:
        sink = Sink()
        verifyObject(IEventSink, sink)
        sink.subscription = self.hub.subscribe(sink, where, last_id)
        sink.subscription.start()
        return sink

    def test_event_fields(self) -> None:
        """Ids start at 1 and grow by one; each event has the clock's time, the node's group, visible status, tags."""
        first = self.hub.publish(EventType.CREATED, record(status=Status.CREATING, tags=("a",)))
        self.clock.advance(2.5)
        second = self.hub.publish(EventType.RUNNING, record(status=Status.SUSPENDING))
        self.assertEqual(first, NodeEvent(1, 1_700_000_000, EventType.CREATED, "demo-1", "demo", "Creating", ("a",)))
        self.assertEqual((second.id, second.time, second.status), (2, 1_700_000_002.5, "Running"))
        deleted = self.hub.publish(EventType.DELETED, record(), status=DELETED)
        self.assertEqual(deleted.status, "Deleted")

    def test_ring(self) -> None:
        """The ring keeps the last ``size`` events."""
        self.publish(6)
        self.assertEqual([e.id for e in self.hub.held()], [3, 4, 5, 6])
        self.assertEqual((self.hub.oldest_id, self.hub.newest_id), (3, 6))
        self.assertRaises(ValueError, EventHub, self.clock.seconds, 0)

    def test_new_only(self) -> None:
        """Without a last id a subscriber gets only events published after it started."""
        self.publish(2)
        sink = self.subscribe()
        self.publish(2)
        self.assertEqual(sink.got, [3, 4])

    def test_replay(self) -> None:
        """With a last id the events after it are replayed from the ring, then new ones follow."""
        self.publish(3)
        sink = self.subscribe(last_id=1)
        self.assertEqual(sink.got, [2, 3])
        self.publish()
        self.assertEqual(sink.got, [2, 3, 4])
        self.assertEqual(self.subscribe(last_id=0).got, [1, 2, 3, 4])

    def test_gap_too_old(self) -> None:
        """An id older than the ring holds: a gap first (the id asked, the oldest held), then the ring."""
        self.publish(6)
        self.assertEqual(self.subscribe(last_id=1).got, [("gap", 1, 3), 3, 4, 5, 6])
        self.assertEqual(self.subscribe(last_id=2).got, [3, 4, 5, 6])

    def test_gap_unknown(self) -> None:
        """An id this run never gave (a daemon restarted): a gap, then everything held, then new events."""
        self.publish(2)
        self.assertEqual(self.subscribe(last_id=9).got, [("gap", 9, 1), 1, 2])
        empty = EventHub(self.clock.seconds)
        sink = Sink()
        subscription = empty.subscribe(sink, EventFilter(), 9)
        subscription.start()
        empty.publish(EventType.PAUSED, record())
        self.assertEqual(sink.got, [("gap", 9, 1), 1])

    def test_filters(self) -> None:
        """hostgroup and tag filters pass only matching events (both: both must match); ids stay the hub's."""
        by_group = self.subscribe(where=EventFilter(hostgroup="other"))
        by_tag = self.subscribe(where=EventFilter(tag="x"))
        both = self.subscribe(where=EventFilter(hostgroup="demo", tag="x"))
        self.publish(group="other")
        self.publish(tags=("x", "y"))
        self.publish(group="other", tags=("x",))
        self.assertEqual((by_group.got, by_tag.got, both.got), ([1, 3], [2, 3], [2]))

    def test_pause_and_catch_up(self) -> None:
        """A paused subscriber gets nothing; resumed, it catches up from the ring (a gap if it fell too far)."""
        sink = self.subscribe()
        assert sink.subscription is not None
        sink.subscription.pauseProducing()
        self.publish(3)
        self.assertEqual(sink.got, [])
        sink.subscription.resumeProducing()
        self.assertEqual(sink.got, [1, 2, 3])
        sink.subscription.pauseProducing()
        self.publish(6)
        sink.subscription.resumeProducing()
        self.assertEqual(sink.got, [1, 2, 3, ("gap", 3, 6), 6, 7, 8, 9])

    def test_pause_during_delivery(self) -> None:
        """A sink whose writes pause the subscription stops at once and continues where it stopped."""
        self.publish(3)
        sink = Sink()
        sink.pause_after = 1
        subscription = sink.subscription = self.hub.subscribe(sink, EventFilter(), 0)
        subscription.start()
        self.assertEqual(sink.got, [1])
        sink.pause_after = None
        subscription.resumeProducing()
        self.assertEqual(sink.got, [1, 2, 3])

    def test_cancel(self) -> None:
        """A cancelled (or stopped) subscription is forgotten by the hub and hears nothing more."""
        first, second = self.subscribe(), self.subscribe()
        self.assertEqual(self.hub.subscribers, 2)
        assert first.subscription is not None and second.subscription is not None
        first.subscription.cancel()
        second.subscription.stopProducing()
        self.publish()
        self.assertEqual((first.got, second.got, self.hub.subscribers), ([], [], 0))

    def test_failing_sink_dropped(self) -> None:
        """A sink that raises is dropped; the others and the publisher carry on."""

        @implementer(IEventSink)
        class Broken(Sink):
            def event(self, event: NodeEvent) -> None:
                raise RuntimeError("boom")

        broken = self.hub.subscribe(Broken(), EventFilter(), None)
        broken.start()
        good = self.subscribe()
        self.publish()
        self.assertEqual((good.got, self.hub.subscribers), ([1], 1))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_reached(self) -> None:
        """reached(n) fires once every event up to n was considered, filtered out or not."""
        self.publish(2, group="other")
        sink = Sink()
        subscription = self.hub.subscribe(sink, EventFilter(hostgroup="demo"), 0)
        waiting = subscription.reached(2)
        self.assertNoResult(waiting)
        subscription.start()
        self.successResultOf(waiting)
        self.assertEqual(sink.got, [])

    def test_listeners(self) -> None:
        """Listeners hear every event at once until stopped."""
        heard: list[int] = []
        stop = self.hub.listen(lambda event: heard.append(event.id))
        self.publish(2)
        stop()
        self.publish()
        self.assertEqual(heard, [1, 2])


class SubscriberPropertyTests(SynchronousTestCase):
    @given(st.integers(1, 6), st.integers(0, 8), st.lists(st.sampled_from(["a", "b", "pause", "resume"]), max_size=40))
    def test_in_order_nothing_lost_silently(self, size: int, before: int, steps: list[str]) -> None:
        """
        Whatever the ring size and the order of publishing, pausing and
        resuming, a subscriber gets matching events only, in id order, never
        one twice; and every matching event it did not get lies before a gap
        it was told of.
        """
        hub = EventHub(Clock().seconds, size=size)
        for _ in range(before):
            hub.publish(EventType.PAUSED, record(group="a"))
        sink = Sink()
        subscription = hub.subscribe(sink, EventFilter(hostgroup="a"), 0)
        subscription.start()
        for step in steps:
            if step == "pause":
                subscription.pauseProducing()
            elif step == "resume":
                subscription.resumeProducing()
            else:
                hub.publish(EventType.PAUSED, record(group=step))
        subscription.resumeProducing()
        ids = [item for item in sink.got if isinstance(item, int)]
        self.assertEqual(ids, sorted(set(ids)))
        self.assertEqual(subscription.last_id, hub.newest_id)
        matching = [e for e in range(1, hub.newest_id + 1) if e <= before or steps_group(steps, before, e) == "a"]
        lost_before = max([oldest for item in sink.got if isinstance(item, tuple) for oldest in [item[2]]],
                          default=1)
        self.assertTrue(set(ids) <= set(matching))
        self.assertEqual([e for e in matching if e >= lost_before and e not in ids], [])


def steps_group(steps: list[str], before: int, event_id: int) -> str:
    """The host group of event ``event_id`` published by ``steps`` after ``before`` others."""
    published = [step for step in steps if step in ("a", "b")]
    return published[event_id - before - 1]


class FleetEventTests(LifecycleTestCase):
    def types(self) -> list[tuple[str, str]]:
        return [(e.type.value, e.status) for e in self.h.events.held()]

    def test_create_pause_resume_delete(self) -> None:
        """A node's life, in order: created, running, agent up, paused, resumed, deleted; ids one apart."""
        self.create(tags=("t",))
        self.h.agents[0].ready()
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.ok(self.fleet.lifecycle.resume("demo-1"))
        self.ok(self.fleet.delete("demo", "demo-1"))
        self.assertEqual(self.types(), [("created", "Creating"), ("running", "Running"), ("agent_up", "Running"),
                                        ("paused", "Paused"), ("resumed", "Running"), ("deleted", "Deleted")])
        events = list(self.h.events.held())
        self.assertEqual([e.id for e in events], [1, 2, 3, 4, 5, 6])
        self.assertEqual({(e.hostname, e.hostgroup, e.tags) for e in events}, {("demo-1", "demo", ("t",))})

    def test_suspend_restore(self) -> None:
        """Suspend and restore are one event each (not their internal statuses); the restore is timed."""
        self.create()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        self.h.reactor.advance(5)
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0))
        self.assertEqual(self.types()[2:], [("suspended", "Suspended"), ("restored", "Running")])
        self.assertEqual(self.h.restores, [("demo", 0.0)])

    def test_failed_suspend_is_no_event(self) -> None:
        """A suspend that fails leaves the node as it was, without an event."""
        self.create()
        self.h.driver.machines[0].failing["save_state"] = "disk full"
        self.failureResultOf(self.do(self.fleet.snapshots.suspend("demo-1")))
        self.assertEqual([t for t, _ in self.types()], ["created", "running"])

    def test_reboot_and_agent(self) -> None:
        """A reboot is an event; the agent lost and back are agent_down and agent_up."""
        self.create()
        agent = self.h.agents[0]
        agent.ready()
        self.ok(self.fleet.lifecycle.shutdown("demo-1", Op.REBOOT))
        agent.lose()
        agent.ready()
        self.assertEqual([t for t, _ in self.types()][2:], ["agent_up", "rebooted", "agent_down", "agent_up"])

    def test_stopped_on_its_own(self) -> None:
        """A persistent node whose VM ends is stopped; an ephemeral one is deleted; a released agent is no news."""
        self.create(persistent=True)
        self.create()
        self.h.agents[0].ready()
        self.h.driver.machines[0].end(0)
        self.h.driver.machines[1].end(0)
        self.h.agents[0].lose()  # after the release: not the node's any more
        got = [(e.type.value, e.hostname) for e in self.h.events.held()][4:]
        self.assertEqual(got, [("agent_up", "demo-1"), ("stopped", "demo-1"), ("deleted", "demo-2")])

    def test_userdata_finished(self) -> None:
        """The end of a node's userdata is an event with its exit code."""
        self.create(userdata="exit 3")
        agent = self.h.agents[0]
        agent.userdata_exit_code = 3
        agent.ready()
        finished = [e for e in self.h.events.held() if e.type is EventType.USERDATA_FINISHED]
        self.assertEqual([(e.hostname, e.exit_code) for e in finished], [("demo-1", 3)])
