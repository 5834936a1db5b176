# -*- test-case-name: tests.hypervisors.qemu.test_machine -*-
"""
Tests for a running QEMU (:mod:`vmservice.hypervisors.qemu.machine`): its stop, its end and its lack
of room, its QMP recorded or scripted.
"""

from __future__ import annotations

from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.qemu_argv import SPEC
from tests.processes import ProcessReactor
from vmservice.hypervisors.qemu import QemuDriver, QemuSettings, describe_exit
from tests.hypervisors.qemu.machines import RESUME, recording_machine, scripted_machine


class GracefulStopTests(SynchronousTestCase):
    def test_power_button_pressed_until_exit(self) -> None:
        """A graceful stop presses the ACPI power button, again every 2 s, and does not kill a VM that exits."""
        reactor = ProcessReactor()
        machine = recording_machine(reactor, self)
        d = machine.stop(True, 10.0)
        self.assertEqual(machine.commands, ["system_powerdown"])
        reactor.advance(2)
        reactor.advance(2)
        self.assertEqual(machine.commands, ["system_powerdown"] * 3)
        reactor.spawned[-1][0].processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.successResultOf(d).exit_code, 0)
        self.assertEqual(reactor.transports[-1].signals, [])
        reactor.advance(10)
        self.assertEqual(len(machine.commands), 3)

    def test_killed_after_grace(self) -> None:
        """A guest that ignores the power button is killed once the grace has passed."""
        reactor = ProcessReactor()
        machine = recording_machine(reactor, self)
        d = machine.stop(True, 5.0)
        reactor.advance(5)
        self.assertEqual(reactor.transports[-1].signals, ["KILL"])
        reactor.spawned[-1][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        self.assertEqual(self.successResultOf(d).signal, 9)

    def test_not_graceful_kills(self) -> None:
        """A stop that is not graceful kills at once, without QMP."""
        reactor = ProcessReactor()
        machine = recording_machine(reactor, self)
        machine.stop(False, 5.0)
        self.assertEqual((machine.commands, reactor.transports[-1].signals), ([], ["KILL"]))


class ExitReportTests(SynchronousTestCase):
    def test_error_from_log_file(self) -> None:
        """Every waiter on ended sees QEMU's error, which QEMU wrote to the node's log file."""
        reactor = ProcessReactor()
        log = self.mktemp()
        machine = self.successResultOf(QemuDriver(reactor, QemuSettings()).start(SPEC, log))
        first, second = machine.ended, machine.ended
        with open(log, "w") as f:
            f.write("qemu-system-x86_64: -drive id=root: Could not open 'disk.qcow2'\n")
        reactor.spawned[0][0].processEnded(Failure(ProcessTerminated(1, None, None)))
        for d in (first, second, machine.ended):
            self.assertIn("Could not open", describe_exit(self.successResultOf(d)))


NO_ROOM = {"event": "BLOCK_IO_ERROR", "data": {"device": "root", "node-name": "#block123", "operation": "write",
                                               "action": "stop", "nospace": True, "reason": "No space left on device"},
           "timestamp": {"seconds": 1, "microseconds": 0}}


class NoRoomTests(SynchronousTestCase):
    def test_event(self) -> None:
        """
        Watching asks QEMU's run state once (which opens the session the
        events come on); each BLOCK_IO_ERROR that stopped the VM for lack of
        room tells every watcher; other I/O errors and events do not.
        """
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-status": [{"status": "running"}]})
        seen: list[str] = []
        machine.on_no_room(lambda: seen.append("a"))
        machine.on_no_room(lambda: seen.append("b"))
        self.assertEqual([name for name, _ in machine.commands], ["query-status"])
        self.assertEqual(seen, [])
        machine.monitor.event({**NO_ROOM, "data": {**NO_ROOM["data"], "nospace": False}})
        machine.monitor.event({**NO_ROOM, "data": {**NO_ROOM["data"], "action": "report"}})
        machine.monitor.event(RESUME)
        self.assertEqual(seen, [])
        machine.monitor.event(NO_ROOM)
        self.assertEqual(seen, ["a", "b"])

    def test_stopped_already(self) -> None:
        """A VM that is stopped on an I/O error when the watch begins (an adopted one) is told at once."""
        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-status": [{"status": "io-error"}]})
        seen: list[str] = []
        machine.on_no_room(lambda: seen.append("stopped"))
        self.assertEqual(seen, ["stopped"])

    def test_unreachable(self) -> None:
        """A QMP that cannot be reached when the watch begins is no error (the VM's end says what happened)."""
        from vmservice.hypervisors.qmp import QMPError

        reactor = ProcessReactor()
        machine = scripted_machine(reactor, self, {"query-status": [QMPError("cannot reach QMP")]})
        seen: list[str] = []
        machine.on_no_room(lambda: seen.append("stopped"))
        self.assertEqual(seen, [])
        self.flushLoggedErrors()
