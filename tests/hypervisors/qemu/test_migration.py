# -*- test-case-name: tests.hypervisors.qemu.test_migration -*-
"""
Tests for the state's saves and loads (:mod:`vmservice.hypervisors.qemu.migration`) through a
machine whose QMP answers are scripted.
"""

from __future__ import annotations

import os
import stat

from twisted.internet.error import ProcessTerminated
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from vmservice.hypervisors.base import HypervisorError
from tests.processes import ProcessReactor
from tests.hypervisors.qemu.machines import COMPLETED, FAILED, RESUME, scripted_machine


class SaveStateTests(SynchronousTestCase):
    def new_path(self, name: str = "state.bin") -> str:
        """Where a state file is to be saved: nothing there yet, in a directory of the test's own."""
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        return os.path.join(directory, name)

    def test_save_polls_until_completed(self) -> None:
        """
        Saving stops the VM, lifts the bandwidth limit, migrates to the file's
        descriptor (made by the daemon, handed over with getfd) and polls
        until completed.
        """
        reactor = ProcessReactor()
        machine = scripted_machine(
            reactor, self, {"query-migrate": [{"status": "active"}, {"status": "active"}, {"status": "completed"}]}
        )
        path = self.new_path()
        d = machine.save_state(path)
        self.assertNoResult(d)
        reactor.advance(machine.POLL)
        reactor.advance(machine.POLL)
        self.successResultOf(d)
        names = [name for name, _ in machine.commands]
        self.assertEqual(names, ["stop", "migrate-set-capabilities", "migrate-set-parameters", "getfd", "migrate",
                                 "query-migrate", "query-migrate", "query-migrate"])
        self.assertEqual(machine.commands[1][1], {"capabilities": [{"capability": "x-ignore-shared", "state": False}]})
        self.assertEqual(machine.passed, [("getfd", path)])
        self.assertEqual(machine.commands[3][1], {"fdname": machine.SAVE_FD})
        self.assertEqual(machine.commands[4][1], {"uri": f"fd:{machine.SAVE_FD}"})

    def test_state_file_is_private_from_its_creation(self) -> None:
        """
        The state file (guest memory, /run/secrets too) is made 0600 by the
        daemon before QEMU writes a byte, whatever the umask (no shell of
        QEMU's creates it).
        """
        reactor = ProcessReactor()
        for save in ("save_state", "save_device_state"):
            machine = scripted_machine(reactor, self, {"query-migrate": [{"status": "completed"}]})
            path = self.new_path()
            old = os.umask(0)
            try:
                self.successResultOf(getattr(machine, save)(path))
            finally:
                os.umask(old)
            info = os.lstat(path)
            self.assertEqual((stat.S_ISREG(info.st_mode), stat.S_IMODE(info.st_mode)), (True, 0o600), save)

    def test_never_over_a_file_or_through_a_link(self) -> None:
        """A file already at the state's path, or a link planted there, fails the save; neither is written."""
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-migrate": [{"status": "completed"}]})
        target = self.new_path("target")
        with open(target, "wb") as f:
            f.write(b"keep")
        link = os.path.join(os.path.dirname(target), "state.bin")
        os.symlink(target, link)
        for path in (target, link):
            failure = self.failureResultOf(machine.save_state(path), HypervisorError)
            self.assertIn("cannot create the state file", str(failure.value))
        self.assertNotIn("migrate", [name for name, _ in machine.commands])
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"keep")

    def test_save_failure(self) -> None:
        """A failed migration fails the save with QEMU's reason."""
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-migrate": [{"status": "failed", "error-desc": "disk full"}]})
        failure = self.failureResultOf(machine.save_state(self.new_path()), HypervisorError)
        self.assertIn("disk full", str(failure.value))

    def test_save_device_state_without_stop(self) -> None:
        """A template's device state is saved running (no stop), its shared memory left out."""
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-migrate": [{"status": "active"}, {"status": "completed"}]})
        path = self.new_path("dev.bin")
        d = machine.save_device_state(path)
        self.assertNoResult(d)
        reactor.advance(machine.POLL)
        self.successResultOf(d)
        names = [name for name, _ in machine.commands]
        self.assertEqual(names, ["migrate-set-capabilities", "migrate-set-parameters", "getfd", "migrate",
                                 "query-migrate", "query-migrate"])
        self.assertEqual(machine.commands[0][1], {"capabilities": [{"capability": "x-ignore-shared", "state": True}]})
        self.assertEqual(machine.passed, [("getfd", path)])
        self.assertEqual(machine.commands[3][1], {"uri": f"fd:{machine.SAVE_FD}"})

    def test_save_device_state_failure(self) -> None:
        """A failed save says why."""
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-migrate": [{"status": "failed", "error-desc": "no"}]})
        failure = self.failureResultOf(machine.save_device_state(self.new_path("dev.bin")), HypervisorError)
        self.assertIn("saving the device state failed: no", str(failure.value))

    def state_file(self, name: str = "dev bin") -> str:
        """A state file on disk (its descriptor is what QEMU gets)."""
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(b"QEVM")
        return path

    def test_load_device_state(self) -> None:
        """
        A clone sets x-ignore-shared and migration events in one command, hands QEMU the open
        file (getfd), loads from that descriptor, and is done at QEMU's RESUME, without polling.
        """
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {}, events={"migrate-incoming": [RESUME]})
        path = self.state_file()
        d = machine.load_device_state(path)
        self.assertNoResult(d)
        reactor.advance(0)
        self.successResultOf(d)
        self.assertEqual(machine.commands, [
            ("migrate-set-capabilities", {"capabilities": [{"capability": "events", "state": True},
                                                           {"capability": "x-ignore-shared", "state": True}]}),
            ("getfd", {"fdname": "state"}),
            ("migrate-incoming", {"uri": "fd:state"}),
        ])
        self.assertEqual(machine.passed, [("getfd", path)])
        self.assertEqual(machine.monitor.watchers, [])

    def test_load_device_state_waits_for_event(self) -> None:
        """Nothing but QEMU's event ends the load: the events of other migrations are not taken for it."""
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {})
        d = machine.load_device_state(self.state_file())
        machine.monitor.event({"event": "MIGRATION", "data": {"status": "active"}})
        machine.monitor.event({"event": "STOP"})
        reactor.advance(machine.LOAD_TIMEOUT / 2)
        self.assertNoResult(d)
        machine.monitor.event(RESUME)
        self.successResultOf(d)
        self.assertNotIn("query-status", [name for name, _ in machine.commands])

    def test_load_device_state_paused(self) -> None:
        """A clone left paused after the load is a failed load (the template was saved running)."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-status": [{"status": "paused"}]},
                                        events={"migrate-incoming": [COMPLETED]})
        d = machine.load_device_state(self.state_file())
        reactor.advance(0)
        self.failureResultOf(d, HypervisorError)

    def test_load_device_state_resume(self) -> None:
        """
        A fork's child of a parent with a memory file (saved paused: MIGRATION completed and no
        RESUME) is let run once loaded with ``resume``.
        """
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-status": [{"status": "paused"}]},
                                        events={"migrate-incoming": [COMPLETED]})
        d = machine.load_device_state(self.state_file(), resume=True)
        reactor.advance(0)
        self.successResultOf(d)
        self.assertEqual([name for name, _ in machine.commands],
                         ["migrate-set-capabilities", "getfd", "migrate-incoming", "query-status", "cont"])

    def test_load_state(self) -> None:
        """A full state loads the same way, without x-ignore-shared, and leaves the VM paused."""
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-status": [{"status": "paused"}]},
                                        events={"migrate-incoming": [COMPLETED]})
        d = machine.load_state(self.state_file("state.bin"))
        reactor.advance(0)
        self.successResultOf(d)
        self.assertEqual(machine.commands[0], ("migrate-set-capabilities",
                                               {"capabilities": [{"capability": "events", "state": True}]}))
        self.assertEqual([name for name, _ in machine.commands],
                         ["migrate-set-capabilities", "getfd", "migrate-incoming", "query-status"])

    def test_load_fails_with_the_exit(self) -> None:
        """
        QEMU reports a failed load and exits (as QEMU 7.2 does on a state it cannot load):
        the load fails with how QEMU ended, at once.
        """
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {}, events={"migrate-incoming": [FAILED]})
        d = machine.load_device_state(self.state_file())
        reactor.advance(0)
        self.assertNoResult(d)
        reactor.spawned[-1][0].processEnded(Failure(ProcessTerminated(1, None, None)))
        failure = self.failureResultOf(d, HypervisorError)
        self.assertIn("loading the VM state: ", str(failure.value))
        self.assertIn("status 1", str(failure.value))
        self.assertEqual(machine.monitor.watchers, [])

    def test_load_fails_without_exit(self) -> None:
        """A failed load after which QEMU does not exit fails once FAILED_LOAD_EXIT has passed."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {}, events={"migrate-incoming": [FAILED]})
        d = machine.load_device_state(self.state_file())
        reactor.advance(0)
        reactor.advance(machine.FAILED_LOAD_EXIT)
        failure = self.failureResultOf(d, HypervisorError)
        self.assertEqual(str(failure.value), "loading the VM state failed")

    def test_qemu_exits_during_load(self) -> None:
        """QEMU exiting before any event fails the load with how it ended."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {})
        d = machine.load_device_state(self.state_file())
        reactor.spawned[-1][0].processEnded(Failure(ProcessTerminated(1, None, None)))
        failure = self.failureResultOf(d, HypervisorError)
        self.assertIn("loading the VM state: ", str(failure.value))
        self.assertIn("status 1", str(failure.value))

    def test_load_timeout(self) -> None:
        """A load QEMU never ends fails after LOAD_TIMEOUT."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {})
        d = machine.load_device_state(self.state_file())
        reactor.advance(machine.LOAD_TIMEOUT)
        failure = self.failureResultOf(d, HypervisorError)
        self.assertIn("not done within", str(failure.value))
        self.assertEqual(machine.monitor.watchers, [])

    def test_missing_state_file(self) -> None:
        """A state file that cannot be opened fails the load before anything reaches QEMU's loader."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {})
        failure = self.failureResultOf(machine.load_device_state("/nonexistent/dev.bin"), HypervisorError)
        self.assertIn("cannot open the state file", str(failure.value))
        self.assertNotIn("migrate-incoming", [name for name, _ in machine.commands])

    def test_incoming_waits_for_paused(self) -> None:
        """Loading a state is finished once QEMU leaves inmigrate for paused."""
        reactor = ProcessReactor()
        machine = scripted_machine(
            reactor, self, {"query-status": [{"status": "inmigrate"}, {"status": "paused"}]}
        )
        d = machine.finish_incoming()
        self.assertNoResult(d)
        reactor.advance(machine.POLL)
        self.successResultOf(d)

    def test_incoming_bad_state(self) -> None:
        """A state other than inmigrate, paused or running fails the load."""
        from vmservice.hypervisors.base import HypervisorError

        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-status": [{"status": "internal-error"}]})
        self.failureResultOf(machine.finish_incoming(), HypervisorError)


class ResumeTests(SynchronousTestCase):
    def test_resume(self) -> None:
        """With no migration under way, resume is ``cont``."""
        reactor = ProcessReactor()
        for status in ("none", "completed", "failed", "cancelled"):
            machine = scripted_machine(reactor, self, {"query-migrate": [{"status": status}]})
            self.successResultOf(machine.resume())
            self.assertEqual([name for name, _ in machine.commands], ["query-migrate", "cont"], status)

    def test_resume_cancels_a_migration_under_way(self) -> None:
        """
        A state save still under way (begun by a daemon that died) is
        cancelled, and its end waited for, before ``cont``: completed, it
        would stop the VM again.
        """
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-migrate": [
            {"status": "active"}, {"status": "cancelling"}, {"status": "cancelled"}]})
        d = machine.resume()
        self.assertNoResult(d)
        reactor.advance(machine.POLL)
        self.successResultOf(d)
        self.assertEqual([name for name, _ in machine.commands],
                         ["query-migrate", "migrate_cancel", "query-migrate", "query-migrate", "cont"])
