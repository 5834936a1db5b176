"""Tests for :mod:`vmservice.e2b.sandboxes`: the sandboxes over fake nodes, on a clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Coroutine, TypeVar

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.e2b.hosts import EPOCH, FakeHost, make_sandboxes, temporary_directory
from vmservice.e2b.inputs import NewSandbox
from vmservice.e2b.sandbox import SandboxState
from vmservice.errors import BadRequest, Conflict, Internal, NotFound
from vmservice.nodes.model import Status

T = TypeVar("T")
START = datetime.fromtimestamp(EPOCH, timezone.utc)


def run(coroutine: Coroutine[Any, Any, T]) -> Deferred[T]:
    return Deferred.fromCoroutine(coroutine)


class SandboxesTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.sandboxes, self.host, self.clock, self.store = make_sandboxes(self)

    def create(self, **given: Any) -> str:
        view = self.successResultOf(run(self.sandboxes.create(NewSandbox(template_id="base", **given))))
        return view.sandbox.sandbox_id

    def test_create(self) -> None:
        """A node of the template's group named by the id; the record written; the default timeout."""
        view = self.successResultOf(run(self.sandboxes.create(NewSandbox(
            template_id="big", metadata=(("k", "v"),), env_vars=(("A", "1"),)))))
        sandbox = view.sandbox
        self.assertEqual((sandbox.sandbox_id, sandbox.group, sandbox.template_id), ("isandbox000000000001", "large",
                                                                                   "big"))
        self.assertEqual(self.host.calls, [("create", "isandbox000000000001")])
        self.assertEqual((sandbox.started_at, sandbox.end_at), (START, START + timedelta(seconds=300)))
        self.assertEqual((view.state, view.cpu_count, view.memory_mb, view.disk_size_mb),
                         (SandboxState.RUNNING, 1, 256, 2048))
        self.assertEqual(len(sandbox.access_token), 43)
        self.assertEqual(self.store.load(), [sandbox])
        self.assertEqual(self.sandboxes.get(sandbox.sandbox_id), view)
        self.assertEqual(self.sandboxes.all(), [view])

    def test_not_secure(self) -> None:
        """``secure: false``: no access token."""
        self.assertEqual(self.sandboxes.get(self.create(secure=False)).sandbox.access_token, "")

    def test_unknown_template(self) -> None:
        """A template no group serves: 400, nothing made."""
        self.failureResultOf(run(self.sandboxes.create(NewSandbox(template_id="nope"))), BadRequest)
        self.assertEqual(self.host.calls, [])

    def test_creating_not_shown(self) -> None:
        """While its node is made the sandbox is not listed; a failed create leaves nothing."""
        self.host.waiting.add("create")
        self.host.fail["create"] = Internal("no room")
        made = run(self.sandboxes.create(NewSandbox(template_id="base")))
        self.assertEqual(self.sandboxes.all(), [])
        self.assertRaises(NotFound, self.sandboxes.get, "isandbox000000000001")
        self.assertEqual(len(self.store.load()), 1)  # written before the node is made
        self.host.held["create"].callback(None)
        self.failureResultOf(made, Internal)
        self.assertEqual((self.store.load(), self.sandboxes.all()), ([], []))

    def test_timeout_kills(self) -> None:
        """At its end a sandbox is killed (its node deleted, its record gone), not a moment later."""
        sandbox_id = self.create(timeout=10)
        self.clock.advance(9.9)
        self.assertEqual(self.sandboxes.get(sandbox_id).state, SandboxState.RUNNING)
        self.clock.advance(0.1)
        self.assertEqual(self.host.calls[-1], ("delete", sandbox_id))
        self.assertRaises(NotFound, self.sandboxes.get, sandbox_id)
        self.assertEqual(self.store.load(), [])

    def test_set_timeout(self) -> None:
        """set_timeout moves the end to now + n (earlier or later); 0 ends it at once."""
        sandbox_id = self.create(timeout=10)
        self.sandboxes.set_timeout(sandbox_id, 100)
        self.clock.advance(50)
        self.assertEqual(self.sandboxes.get(sandbox_id).sandbox.end_at, START + timedelta(seconds=100))
        self.assertEqual(self.store.load()[0].end_at, START + timedelta(seconds=100))
        self.sandboxes.set_timeout(sandbox_id, 0)
        self.clock.advance(0)
        self.assertRaises(NotFound, self.sandboxes.get, sandbox_id)

    def test_auto_pause(self) -> None:
        """With autoPause the end pauses it (its node suspended); a paused sandbox has no end."""
        sandbox_id = self.create(timeout=5, auto_pause=True)
        self.clock.advance(5)
        self.assertEqual(self.host.calls[-1], ("suspend", sandbox_id))
        self.assertEqual(self.sandboxes.get(sandbox_id).state, SandboxState.PAUSED)
        self.clock.advance(10_000)
        self.assertEqual(self.host.calls[-1], ("suspend", sandbox_id))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_pause_and_connect(self) -> None:
        """Pause, pause again (409 already_paused), connect resumes (True) with a new end, connect again (False)."""
        sandbox_id = self.create(timeout=10)
        self.successResultOf(run(self.sandboxes.pause(sandbox_id)))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        error = self.failureResultOf(run(self.sandboxes.pause(sandbox_id)), Conflict).value
        self.assertEqual(error.code, "already_paused")
        self.clock.advance(100)
        view, resumed = self.successResultOf(run(self.sandboxes.connect(sandbox_id, 30)))
        self.assertTrue(resumed)
        self.assertEqual((view.state, view.sandbox.end_at), (SandboxState.RUNNING, START + timedelta(seconds=130)))
        view, resumed = self.successResultOf(run(self.sandboxes.connect(sandbox_id, 5)))
        self.assertFalse(resumed)
        self.assertEqual(view.sandbox.end_at, START + timedelta(seconds=130))  # max(current, now + 5)
        view, resumed = self.successResultOf(run(self.sandboxes.connect(sandbox_id, 60)))
        self.assertEqual(view.sandbox.end_at, START + timedelta(seconds=160))
        self.clock.advance(59.9)
        self.sandboxes.get(sandbox_id)
        self.clock.advance(0.1)
        self.assertRaises(NotFound, self.sandboxes.get, sandbox_id)

    def test_connect_default(self) -> None:
        """A connect naming no timeout extends to the default's."""
        sandbox_id = self.create(timeout=10)
        view, _ = self.successResultOf(run(self.sandboxes.connect(sandbox_id, None)))
        self.assertEqual(view.sandbox.end_at, START + timedelta(seconds=300))

    def test_busy(self) -> None:
        """A pause or connect while a pause is under way is a conflict; a kill is not."""
        sandbox_id = self.create()
        self.host.waiting.add("suspend")
        pausing = run(self.sandboxes.pause(sandbox_id))
        self.assertEqual(self.failureResultOf(run(self.sandboxes.pause(sandbox_id)), Conflict).value.code, "busy")
        self.failureResultOf(run(self.sandboxes.connect(sandbox_id, 10)), Conflict)
        killing = run(self.sandboxes.kill(sandbox_id))  # these nodes go at once (the fleet's wait their turn)
        self.successResultOf(killing)
        self.host.held["suspend"].callback(None)
        self.failureResultOf(pausing, NotFound)  # its outcome, arriving once the sandbox ended, is no matter
        self.assertRaises(NotFound, self.sandboxes.get, sandbox_id)

    def test_failed_pause(self) -> None:
        """A failed suspend: running on, its timer armed again."""
        sandbox_id = self.create(timeout=10)
        self.host.fail["suspend"] = Internal("save failed")
        self.failureResultOf(run(self.sandboxes.pause(sandbox_id)), Internal)
        self.assertEqual(self.sandboxes.get(sandbox_id).state, SandboxState.RUNNING)
        self.clock.advance(10)
        self.assertEqual(self.host.calls[-1], ("delete", sandbox_id))

    def test_failed_resume(self) -> None:
        """A failed restore: still paused."""
        sandbox_id = self.create()
        self.successResultOf(run(self.sandboxes.pause(sandbox_id)))
        self.host.fail["restore"] = Internal("restore failed")
        self.failureResultOf(run(self.sandboxes.connect(sandbox_id, 10)), Internal)
        self.assertEqual(self.sandboxes.get(sandbox_id).state, SandboxState.PAUSED)

    def test_kill(self) -> None:
        """A kill deletes the node; a second is 404; a paused sandbox is killed too."""
        first, second = self.create(), self.create()
        self.successResultOf(run(self.sandboxes.kill(first)))
        self.failureResultOf(run(self.sandboxes.kill(first)), NotFound)
        self.successResultOf(run(self.sandboxes.pause(second)))
        self.successResultOf(run(self.sandboxes.kill(second)))
        self.assertEqual((self.sandboxes.all(), self.store.load(), self.host.nodes), ([], [], {}))

    def test_failed_kill(self) -> None:
        """A failed delete: the sandbox stays, and its timer tries again ten seconds later."""
        sandbox_id = self.create(timeout=1000)
        self.host.fail["delete"] = Internal("busy disk")
        self.failureResultOf(run(self.sandboxes.kill(sandbox_id)), Internal)
        self.sandboxes.get(sandbox_id)
        del self.host.fail["delete"]
        self.clock.advance(10)
        self.assertRaises(NotFound, self.sandboxes.get, sandbox_id)

    def test_deleted_elsewhere(self) -> None:
        """A node deleted through the Slicer API takes its sandbox with it, timer and record."""
        sandbox_id = self.create()
        self.host.remove(sandbox_id)
        self.assertRaises(NotFound, self.sandboxes.get, sandbox_id)
        self.assertEqual((self.store.load(), self.clock.getDelayedCalls()), ([], []))

    def test_metrics(self) -> None:
        """A running sandbox's sample; none while paused."""
        sandbox_id = self.create()
        self.assertIsNotNone(self.successResultOf(run(self.sandboxes.metrics(sandbox_id))))
        self.successResultOf(run(self.sandboxes.pause(sandbox_id)))
        self.assertIsNone(self.successResultOf(run(self.sandboxes.metrics(sandbox_id))))
        self.failureResultOf(run(self.sandboxes.metrics("inosuchsandbox000000")), NotFound)

    def test_stop(self) -> None:
        """The service's stop cancels every timer."""
        self.create()
        self.sandboxes.stopService()
        self.assertEqual(self.clock.getDelayedCalls(), [])


class RecoveryTests(SynchronousTestCase):
    """The records read back at the start, once the fleet's recovery is done."""

    def test_recover(self) -> None:
        directory = temporary_directory(self)
        before, host, clock, _ = make_sandboxes(self, directory=directory)
        running = self.successResultOf(run(before.create(NewSandbox(template_id="base", timeout=100))))
        paused = self.successResultOf(run(before.create(NewSandbox(template_id="base", timeout=10))))
        gone = self.successResultOf(run(before.create(NewSandbox(template_id="base"))))
        self.successResultOf(run(before.pause(paused.sandbox.sandbox_id)))
        before.stopService()
        del host.nodes[gone.sandbox.sandbox_id]
        host.done = Deferred()
        after, _, clock, store = make_sandboxes(self, host=host, directory=directory)
        self.assertEqual(after.all(), [])  # until the fleet's recovery is over
        host.done.callback(None)
        self.assertEqual({view.sandbox.sandbox_id: view.state for view in after.all()},
                         {running.sandbox.sandbox_id: SandboxState.RUNNING,
                          paused.sandbox.sandbox_id: SandboxState.PAUSED})
        self.assertEqual(len(store.load()), 2)
        clock.advance(100)
        self.assertEqual([view.sandbox.sandbox_id for view in after.all()], [paused.sandbox.sandbox_id])
        self.assertEqual(host.nodes[paused.sandbox.sandbox_id].status, Status.SUSPENDED)
