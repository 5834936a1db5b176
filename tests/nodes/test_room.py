"""Tests for :mod:`vmservice.nodes.room`: failures for lack of room in the state directory."""

from __future__ import annotations

import errno
import os
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeMachine, FleetHarness
from tests.nodes.fleet_case import LifecycleTestCase
from vmservice.errors import Internal, StateDirFull, http_error, no_room
from vmservice.nodes import store
from vmservice.nodes.model import CreateRequest, Status, Wait
from vmservice.nodes.room import RoomWatch, room_for
from vmservice.nodes.warm.template_build import TemplateBuilder
from vmservice.nodes.warm.template_key import TemplateKey
from vmservice.nodes.warm.template_files import Template


class RoomForTests(SynchronousTestCase):
    def test_no_room(self) -> None:
        """A failure for lack of room in the block is 507 state_dir_full naming what did not fit."""
        for number in (errno.ENOSPC, errno.EDQUOT):
            with self.assertRaises(StateDirFull) as raised:
                with room_for("the snapshot of node 'demo-1'"):
                    raise OSError(number, "full")
            status, body = http_error(raised.exception)
            self.assertEqual((status, body["code"]), (507, "state_dir_full"))
            self.assertIn("the snapshot of node 'demo-1'", body["error"])
            self.assertIn("full", body["error"])

    def test_wrapped(self) -> None:
        """A service error raised from one of no room (a driver's 500) becomes 507 too."""
        with self.assertRaises(StateDirFull):
            with room_for("a new node"):
                try:
                    raise OSError(errno.ENOSPC, "No space left on device")
                except OSError as error:
                    raise Internal("suspend of node 'demo-1' failed", code="suspend_failed") from error

    def test_other_errors_pass(self) -> None:
        """Any other failure passes unchanged, and a StateDirFull keeps its own message."""
        with self.assertRaises(Internal):
            with room_for("x"):
                raise Internal("boom")
        with self.assertRaises(OSError):
            with room_for("x"):
                raise OSError(errno.EIO, "Input/output error")
        with self.assertRaises(StateDirFull) as raised:
            with room_for("x"):
                raise StateDirFull("its own words")
        self.assertEqual(str(raised.exception), "its own words")


class FullStateDirTests(LifecycleTestCase):
    """
    Operations whose writes in the state directory fail for lack of room: 507
    state_dir_full, nothing half-written, the node as it was, and the same
    operation succeeding once there is room.
    """

    def full(self, *names: str) -> list[str]:
        """Make the store's writes whose file is one of ``names`` fail with ENOSPC until :meth:`room`."""
        self.failing = set(names)
        refused: list[str] = []
        real = store.write_atomic

        def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
            if os.path.basename(path) in self.failing or "*" in self.failing:
                refused.append(path)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(path, data, mode)

        self.patch(store, "write_atomic", write_atomic)
        return refused

    def room(self) -> None:
        self.failing = set()

    def test_create_without_room_for_the_counter(self) -> None:
        """No room for the hostname counter: 507, nothing registered or on disk; then the create succeeds."""
        self.full("demo")
        error = self.fails(self.fleet.create("demo", CreateRequest(), Wait.NONE, 300.0), StateDirFull, "state_dir_full")
        self.assertEqual(error.status, 507)
        self.assertEqual(self.fleet.list(), [])
        self.assertEqual(os.listdir(self.h.store.nodes_dir), [])
        self.room()
        self.assertEqual(self.create().hostname, "demo-1")

    def test_create_without_room_for_the_record(self) -> None:
        """No room for the record: 507; the node is neither listed nor on disk, no VM ran, no event says it was."""
        seen: list[str] = []
        self.h.events.listen(lambda event: seen.append(event.type.value))  # type: ignore[misc]
        self.full("node.json")
        self.fails(self.fleet.create("demo", CreateRequest(), Wait.NONE, 300.0), StateDirFull, "state_dir_full")
        self.assertEqual(self.fleet.list(), [])
        self.assertEqual(os.listdir(self.h.store.nodes_dir), [])
        self.assertEqual(self.h.driver.machines, [])
        self.assertEqual(seen, [])
        self.room()
        self.assertEqual(self.create().status, Status.RUNNING)

    def test_create_without_room_for_the_disk(self) -> None:
        """qemu-img finding no room for the disk: 507, the node removed (record, directory, network)."""
        self.h.disks.failing = "qemu-img failed (1): qemu-img: disk.qcow2: Could not write: No space left on device"
        self.fails(self.fleet.create("demo", CreateRequest(), Wait.NONE, 300.0), StateDirFull, "state_dir_full")
        self.assertEqual(self.fleet.list(), [])
        self.assertEqual(os.listdir(self.h.store.nodes_dir), [])
        self.assertEqual(self.h.network.attached, {})

    def test_suspend_without_room_for_the_record(self) -> None:
        """No room for the Suspending record: 507 before the VM is touched; Running, and suspended once there is room."""
        self.create()
        machine = self.h.driver.machines[0]
        self.full("node.json")
        self.fails(self.fleet.snapshots.suspend("demo-1"), StateDirFull, "state_dir_full")
        self.assertEqual(machine.commands, [])
        self.assertEqual(self.fleet.node("demo-1").status, Status.RUNNING)
        self.assertEqual(self.stored().status, Status.RUNNING)
        self.room()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        self.assertEqual(self.stored().status, Status.SUSPENDED)

    def test_suspend_without_room_for_the_snapshot(self) -> None:
        """QEMU finding no room for the snapshot: 507, no partial file, the VM resumed, Running in memory and on disk."""
        self.create()
        machine = self.h.driver.machines[0]
        machine.failing["save_state"] = "saving the VM state failed: Unable to write to file: No space left on device"
        self.fails(self.fleet.snapshots.suspend("demo-1"), StateDirFull, "state_dir_full")
        self.assertEqual(machine.commands, ["save_state", "resume"])
        self.assertFalse(os.path.exists(self.path("state.bin.partial")))
        self.assertEqual(self.fleet.node("demo-1").status, Status.RUNNING)
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_suspend_without_room_to_write_back(self) -> None:
        """
        A save that fails and leaves no room to write the record back: the
        save's own error, the node Running in memory, its record saying
        Suspending, which the next start finds with a running VM: adopted, Running.
        """
        self.create()
        machine = self.h.driver.machines[0]
        machine.failing["save_state"] = "saving the VM state failed: No space left on device"
        real = store.write_atomic
        writes: list[str] = []

        def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
            writes.append(path)
            if len(writes) > 1:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(path, data, mode)

        self.patch(store, "write_atomic", write_atomic)
        self.fails(self.fleet.snapshots.suspend("demo-1"), StateDirFull, "state_dir_full")
        self.assertEqual(self.fleet.node("demo-1").status, Status.RUNNING)
        self.assertEqual(self.stored().status, Status.SUSPENDING)
        self.patch(store, "write_atomic", real)
        self.h.crash()
        again = self.restart()
        self.assertEqual(again.fleet.node("demo-1").status, Status.RUNNING)
        self.assertIsNone(machine._exit)

    def test_restore_without_room_for_the_record(self) -> None:
        """No room for the record: 507, the node Suspended with its snapshot, no VM left running."""
        self.create()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        self.full("node.json")
        self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0), StateDirFull, "state_dir_full")
        self.assertEqual(self.fleet.node("demo-1").status, Status.SUSPENDED)
        self.assertTrue(os.path.exists(self.path("state.bin")))
        self.assertTrue(all(m._exit is not None for m in self.h.driver.machines))
        self.room()
        self.ok(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0))
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_restore_without_room_for_running(self) -> None:
        """
        Room for Restoring but not for Running: the restore fails before the
        guest runs on, its VM killed, the snapshot kept, the node Suspended.
        """
        self.create()
        self.ok(self.fleet.snapshots.suspend("demo-1"))
        real = store.write_atomic
        writes: list[bytes] = []

        def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
            writes.append(data)
            if b'"Running"' in data:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(path, data, mode)

        self.patch(store, "write_atomic", write_atomic)
        self.fails(self.fleet.snapshots.restore("demo-1", Wait.NONE, 300.0), StateDirFull, "state_dir_full")
        restored = self.h.driver.machines[-1]
        self.assertEqual(restored.commands, ["finish_incoming"])
        self.assertIsNotNone(restored._exit)
        self.assertTrue(os.path.exists(self.path("state.bin")))
        self.assertEqual(self.fleet.node("demo-1").status, Status.SUSPENDED)
        self.assertEqual(self.stored().status, Status.SUSPENDED)

    def test_relaunch_without_room(self) -> None:
        """A relaunch whose Running record finds no room: 507, its VM killed, the node Stopped as it was."""
        self.create(persistent=True)
        self.h.driver.machines[0].end(0)
        self.assertEqual(self.stored().status, Status.STOPPED)
        self.full("node.json")
        self.fails(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0), StateDirFull, "state_dir_full")
        self.assertIsNotNone(self.h.driver.machines[-1]._exit)
        self.assertEqual(self.fleet.node("demo-1").status, Status.STOPPED)
        self.assertEqual(self.stored().status, Status.STOPPED)
        self.room()
        self.ok(self.fleet.lifecycle.relaunch("demo-1", Wait.NONE, 300.0))
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_delete_without_room(self) -> None:
        """
        A delete with no room for the Deleting record still deletes (it is
        what makes room): the record removed first, then the VM, disk and
        directory.
        """
        self.create()
        machine = self.h.driver.machines[0]
        self.full("node.json")
        result = self.ok(self.fleet.delete("demo", "demo-1"))
        self.assertTrue(result.disk_removed)
        self.assertEqual(self.fleet.list(), [])
        self.assertIsNotNone(machine._exit)
        self.assertEqual(os.listdir(self.h.store.nodes_dir), [])


class RoomWatchTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.free = 0
        self.watch = RoomWatch(self.clock, "/state", free=self.look)
        self.looks: list[str] = []
        self.went_on: list[str] = []

    def look(self, path: str) -> int:
        self.looks.append(path)
        if self.free < 0:
            raise OSError(errno.EIO, "Input/output error")
        return self.free

    def go_on(self, hostname: str) -> Any:
        async def go_on() -> None:
            self.went_on.append(hostname)

        return go_on

    def test_waits_for_room(self) -> None:
        """
        Nothing is looked at while no node waits; while one does, the state
        directory's free space every INTERVAL seconds, and each waiting node
        goes on once MIN_ROOM bytes are free; then the looks stop.
        """
        self.clock.advance(60)
        self.assertEqual(self.looks, [])
        self.watch.wait("demo-1", self.go_on("demo-1"))
        self.watch.wait("demo-2", self.go_on("demo-2"))
        self.assertEqual(self.watch.waiting, ["demo-1", "demo-2"])
        self.clock.advance(RoomWatch.INTERVAL)
        self.free = RoomWatch.MIN_ROOM - 1
        self.clock.advance(RoomWatch.INTERVAL)
        self.assertEqual((self.looks, self.went_on), (["/state", "/state"], []))
        self.free = RoomWatch.MIN_ROOM
        self.clock.advance(RoomWatch.INTERVAL)
        self.assertEqual(self.went_on, ["demo-1", "demo-2"])
        self.assertEqual(self.watch.waiting, [])
        self.clock.advance(60)
        self.assertEqual(len(self.looks), 3)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_look_now(self) -> None:
        """
        A look at once for a waiting node (a request for its guest): with too
        little room it keeps waiting; with room it goes on at once, and the
        looks stop once no node waits.  A node that does not wait is not
        looked for.
        """
        self.successResultOf(Deferred.fromCoroutine(self.watch.look_now("demo-1")))
        self.assertEqual(self.looks, [])
        self.watch.wait("demo-1", self.go_on("demo-1"))
        self.free = RoomWatch.MIN_ROOM - 1
        self.successResultOf(Deferred.fromCoroutine(self.watch.look_now("demo-1")))
        self.assertEqual((self.looks, self.went_on, self.watch.waiting), (["/state"], [], ["demo-1"]))
        self.free = RoomWatch.MIN_ROOM
        self.successResultOf(Deferred.fromCoroutine(self.watch.look_now("demo-1")))
        self.assertEqual((self.went_on, self.watch.waiting), (["demo-1"], []))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_unreadable(self) -> None:
        """A free space that cannot be read lets no node go on; the next look may."""
        self.watch.wait("demo-1", self.go_on("demo-1"))
        self.free = -1
        self.clock.advance(RoomWatch.INTERVAL)
        self.assertEqual(self.went_on, [])
        self.free = RoomWatch.MIN_ROOM
        self.clock.advance(RoomWatch.INTERVAL)
        self.assertEqual(self.went_on, ["demo-1"])

    def test_stopped(self) -> None:
        """A stopped watch forgets who waits and looks no more."""
        self.watch.startService()
        self.watch.wait("demo-1", self.go_on("demo-1"))
        self.watch.stopService()
        self.free = RoomWatch.MIN_ROOM
        self.clock.advance(60)
        self.assertEqual((self.looks, self.went_on), ([], []))


class NodeRoomTests(LifecycleTestCase):
    """A node whose VM stops on a write its state directory has no room for."""

    def stall(self, hostname: str = "demo-1") -> FakeMachine:
        self.h.free = 0
        machine = self.h.driver.machines[-1]
        machine.no_room()
        return machine

    def guest(self, hostname: str = "demo-1") -> Deferred[Any]:
        return self.do(self.fleet.guest(hostname, wait=0))

    def test_stalled_and_resumed(self) -> None:
        """
        What ran in the guest is cut off (state_dir_full), requests for the
        guest are 507 meanwhile; once there is room the VM is resumed, and
        the guest is reached again once its agent reconnected.
        """
        self.create()
        agent = self.h.agents[0]
        agent.ready()
        machine = self.stall()
        [cut] = agent.interrupted
        status, body = http_error(cut)
        self.assertEqual((status, body["code"]), (507, "state_dir_full"))
        self.assertEqual(self.failureResultOf(self.guest(), StateDirFull).value.code, "state_dir_full")
        machine.no_room()  # told again: nothing new
        self.assertEqual(len(agent.interrupted), 1)
        self.h.reactor.advance(RoomWatch.INTERVAL)
        self.assertNotIn("resume", machine.commands)
        self.h.free = RoomWatch.MIN_ROOM
        self.h.reactor.advance(RoomWatch.INTERVAL)
        self.assertEqual(machine.commands, ["resume"])
        agent.ready()
        self.assertIs(self.successResultOf(self.guest()), agent)
        self.assertEqual(self.stored().status, Status.RUNNING)

    def test_room_back_at_a_request(self) -> None:
        """
        A request for the guest of a VM stopped for lack of room, once there
        is room again, lets it run on at once instead of at the watch's next
        look, and reaches the guest.
        """
        self.create()
        agent = self.h.agents[0]
        agent.ready()
        machine = self.stall()
        self.h.free = RoomWatch.MIN_ROOM
        reached = self.do(self.fleet.guest("demo-1"))
        self.assertEqual(machine.commands, ["resume"])
        self.assertEqual(self.h.room.waiting, [])
        self.assertNoResult(reached)  # the agent's connection, cut off at the stop, comes back
        agent.ready()
        self.assertIs(self.successResultOf(reached), agent)
        self.h.reactor.advance(RoomWatch.INTERVAL)
        self.assertEqual(machine.commands, ["resume"])

    def test_stalled_again(self) -> None:
        """A VM that stops again after it was let run on waits again, and runs on at the next room."""
        self.create()
        machine = self.stall()
        self.h.free = RoomWatch.MIN_ROOM
        self.h.reactor.advance(RoomWatch.INTERVAL)
        self.h.free = 0
        machine.no_room()
        self.failureResultOf(self.guest(), StateDirFull)
        self.h.free = RoomWatch.MIN_ROOM
        self.h.reactor.advance(RoomWatch.INTERVAL)
        self.assertEqual(machine.commands, ["resume", "resume"])

    def test_paused_meanwhile(self) -> None:
        """A node paused while it waited is not resumed when room comes back: its resume retries the write."""
        self.create()
        machine = self.stall()
        self.ok(self.fleet.lifecycle.pause("demo-1"))
        self.h.free = RoomWatch.MIN_ROOM
        self.h.reactor.advance(RoomWatch.INTERVAL)
        self.assertEqual(machine.commands, ["pause"])
        self.assertEqual(self.fleet.node("demo-1").status, Status.PAUSED)

    def test_deleted_meanwhile(self) -> None:
        """A node deleted while it waited is forgotten by the watch's next look."""
        self.create()
        machine = self.stall()
        self.ok(self.fleet.delete("demo", "demo-1"))
        self.h.free = RoomWatch.MIN_ROOM
        self.h.reactor.advance(RoomWatch.INTERVAL)
        self.assertEqual(machine.commands, [])
        self.assertEqual(self.h.room.waiting, [])

    def test_create_stalled(self) -> None:
        """A create whose VM stops for lack of room before its agent answered: 507 at once, the node removed."""
        d = self.do(self.fleet.create("demo", CreateRequest(), Wait.AGENT, 300.0))
        machine = self.stall()
        self.assertEqual(self.failureResultOf(d, StateDirFull).value.code, "state_dir_full")
        self.assertIsNotNone(machine._exit)
        self.assertEqual(self.fleet.list(), [])
        self.assertEqual(os.listdir(self.h.store.nodes_dir), [])

    def test_adopted_stalled(self) -> None:
        """After a restart, a VM found stopped for lack of room is adopted (Running), waits, and runs on."""
        self.create()
        machine = self.stall()
        self.h = self.restart()
        self.assertEqual(self.fleet.node("demo-1").status, Status.RUNNING)
        self.assertIsNone(machine._exit)
        self.h.free = 0
        self.failureResultOf(self.guest(), StateDirFull)
        self.h.free = RoomWatch.MIN_ROOM
        self.h.reactor.advance(RoomWatch.INTERVAL)
        self.assertEqual(machine.commands, ["resume"])


class TemplateBuildRoomTests(SynchronousTestCase):
    def test_build_stalled(self) -> None:
        """A template VM that stops for lack of room fails its build at once, as no room; its VM killed."""
        state_dir = self.mktemp()
        h = FleetHarness(state_dir)
        directory = os.path.join(state_dir, "templates", "t")
        os.makedirs(directory)
        key = TemplateKey(image="default", build="/img", qemu="fake 1", ram_bytes=256 << 20, vcpus=1,
                          network=False, storage_size=1 << 30)
        template = Template(key=key, directory=directory, disk=os.path.join(directory, "disk.qcow2"),
                            device_state=os.path.join(directory, "dev.bin"), ram_file=os.path.join(directory, "ram"),
                            kernel=h.image.kernel.path, initrd=h.image.initrd.path)
        built = Deferred.fromCoroutine(TemplateBuilder(h.parts.nodes(), h.image.rootfs.path)(template))
        self.assertNoResult(built)
        machine = h.driver.machines[-1]
        machine.no_room()
        error = self.failureResultOf(built, OSError).value
        self.assertTrue(no_room(error))
        self.assertIsNotNone(machine._exit)
        self.assertTrue(h.agents[-1].stopped)
