"""
QEMU machines for the tests of :mod:`vmservice.hypervisors.qemu`, started on
a fake process reactor, whose QMP commands are recorded
(:func:`recording_machine`) or answered from a script
(:func:`scripted_machine`); and the QMP events that end a load.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.qemu_argv import SPEC
from tests.processes import ProcessReactor
from vmservice.hypervisors.qemu import QemuDriver, QemuMachine, QemuSettings

#: QEMU's events at the end of a load: the VM runs; the migration completed or failed.
RESUME = {"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 0}}
COMPLETED = {"event": "MIGRATION", "data": {"status": "completed"}}
FAILED = {"event": "MIGRATION", "data": {"status": "failed"}}


def recording_machine(reactor: ProcessReactor, testcase: SynchronousTestCase) -> Any:
    """A QemuMachine whose QMP commands are recorded (``commands``) instead of sent."""

    class Recording(QemuMachine):
        commands: list[str] = []

        async def qmp(self, command: str, **arguments: Any) -> Any:
            self.commands.append(command)
            return {}

    driver = QemuDriver(reactor, QemuSettings())
    machine = testcase.successResultOf(driver.start(SPEC, testcase.mktemp()))
    recording = Recording(reactor, reactor.spawned[-1][0], SPEC.qmp_socket)
    recording.commands = []
    del machine
    return recording


def scripted_machine(
    reactor: ProcessReactor, testcase: SynchronousTestCase, answers: dict[str, list[Any]],
    events: dict[str, list[dict[str, Any]]] | None = None,
) -> Any:
    """
    A QemuMachine whose QMP answers come from a script.

    :param answers: command -> its answers, one for each time it is sent
        (the last one again and again); an exception is raised.
    :param events: command -> the QMP events QEMU sends once it has
        answered it (e.g. ``RESUME`` after ``migrate-incoming``).
    """

    class Scripted(QemuMachine):
        commands: list[tuple[str, dict[str, Any]]] = []
        #: The file each descriptor passed along a command named, as (command, path).
        passed: list[tuple[str, str]] = []

        async def qmp(self, command: str, **arguments: Any) -> Any:
            self.commands.append((command, arguments))
            queue = answers.get(command, [{}])
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
            if isinstance(answer, Exception):
                raise answer
            for event in (events or {}).get(command, []):
                reactor.callLater(0, self.monitor.event, event)
            return answer

        async def qmp_passing(self, fd: int, command: str, **arguments: Any) -> Any:
            self.passed.append((command, os.readlink(f"/proc/self/fd/{fd}")))
            return await self.qmp(command, **arguments)

    testcase.successResultOf(QemuDriver(reactor, QemuSettings()).start(SPEC, testcase.mktemp()))
    machine = Scripted(reactor, reactor.spawned[-1][0], SPEC.qmp_socket)
    machine.commands = []
    machine.passed = []
    return machine
