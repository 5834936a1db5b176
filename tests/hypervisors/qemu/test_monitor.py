# -*- test-case-name: tests.hypervisors.qemu.test_monitor -*-
"""
Tests for the QMP monitor of a machine (:mod:`vmservice.hypervisors.qemu.monitor`) over the
connections a memory reactor records.
"""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ProcessTerminated
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.hypervisors.descriptor_transport import DescriptorTransport
from tests.hypervisors.qemu_argv import SPEC
from vmservice.hypervisors.base import HypervisorError
from tests.processes import ProcessReactor
from vmservice.hypervisors.qemu import QemuDriver, QemuSettings
from tests.hypervisors.qemu.machines import RESUME


class QmpTimeoutTests(SynchronousTestCase):
    def test_stuck_qemu(self) -> None:
        """A QMP command QEMU does not answer fails after QMP_TIMEOUT and drops the session."""
        from twisted.internet.testing import StringTransport

        from vmservice.hypervisors.qemu import QemuMachine
        from vmservice.hypervisors.qmp import QMPError, QMPProtocol

        reactor = ProcessReactor()
        self.successResultOf(QemuDriver(reactor, QemuSettings()).start(SPEC, self.mktemp()))
        machine = QemuMachine(reactor, reactor.spawned[-1][0], SPEC.qmp_socket)
        protocol = QMPProtocol()
        transport = StringTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n')
        machine.monitor.session = protocol
        d = Deferred.fromCoroutine(machine.qmp("query-status"))
        self.assertNoResult(d)
        reactor.advance(machine.QMP_TIMEOUT)
        failure = self.failureResultOf(d, QMPError)
        self.assertIn("no answer", str(failure.value))
        self.assertTrue(transport.disconnecting)


class QmpSessionTests(SynchronousTestCase):
    """
    One connection to the monitor for every caller, made on first use, over
    the connections a memory reactor records.
    """

    def machine(self) -> tuple[ProcessReactor, Any]:
        """A reactor and a QemuMachine of a QEMU started on it, not yet connected to QMP."""
        from vmservice.hypervisors.qemu import QemuMachine

        reactor = ProcessReactor()
        self.successResultOf(QemuDriver(reactor, QemuSettings()).start(SPEC, self.mktemp()))
        return reactor, QemuMachine(reactor, reactor.spawned[-1][0], SPEC.qmp_socket)

    def accept(self, reactor: ProcessReactor, index: int = 0) -> tuple[Any, StringTransport]:
        """Complete the ``index``-th connection attempt; the protocol and its transport."""
        address, factory, timeout, check_pid = reactor.unixClients[index]
        self.assertEqual(address, SPEC.qmp_socket)
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def sent(self, transport: StringTransport) -> list[str]:
        """The commands written on ``transport`` so far."""
        return [json.loads(line)["execute"] for line in transport.value().splitlines() if line]

    def test_callers_share_one_connection(self) -> None:
        """
        Callers that arrive while the connection is being made wait for it; once QEMU greets,
        their commands go out in order on it, each caller gets its own answer, and a later
        caller uses the same connection.
        """
        reactor, machine = self.machine()
        first = Deferred.fromCoroutine(machine.qmp("query-status"))
        second = Deferred.fromCoroutine(machine.qmp("stop"))
        self.assertEqual(len(reactor.unixClients), 1)
        protocol, transport = self.accept(reactor)
        self.assertEqual(self.sent(transport), [])
        self.assertNoResult(first)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n')
        self.assertEqual(self.sent(transport), ["qmp_capabilities", "query-status", "stop"])
        protocol.dataReceived(b'{"return": {"status": "running"}}\n{"return": {}}\n')
        self.assertEqual(self.successResultOf(first), {"status": "running"})
        self.assertEqual(self.successResultOf(second), {})
        third = Deferred.fromCoroutine(machine.qmp("cont"))
        self.assertEqual(len(reactor.unixClients), 1)
        self.assertEqual(self.sent(transport)[-1], "cont")
        protocol.dataReceived(b'{"return": {}}\n')
        self.assertEqual(self.successResultOf(third), {})

    def test_cancelled_caller_leaves_the_others(self) -> None:
        """A caller that gives up while the connection is made fails alone; the others go on."""
        reactor, machine = self.machine()
        gone = Deferred.fromCoroutine(machine.qmp("query-status"))
        staying = Deferred.fromCoroutine(machine.qmp("stop"))
        gone.cancel()
        self.failureResultOf(gone, CancelledError)
        protocol, transport = self.accept(reactor)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n')
        self.assertEqual(self.sent(transport), ["qmp_capabilities", "stop"])
        protocol.dataReceived(b'{"return": {}}\n')
        self.assertEqual(self.successResultOf(staying), {})

    def test_no_greeting_fails_every_caller(self) -> None:
        """
        When QEMU does not greet within QMP_TIMEOUT, every waiting caller fails, the connection
        is dropped, and the next caller connects anew.
        """
        from vmservice.hypervisors.qmp import QMPError

        reactor, machine = self.machine()
        first = Deferred.fromCoroutine(machine.qmp("query-status"))
        second = Deferred.fromCoroutine(machine.qmp("stop"))
        protocol, transport = self.accept(reactor)
        reactor.advance(machine.QMP_TIMEOUT)
        for d in (first, second):
            self.assertIn("did not greet", str(self.failureResultOf(d, QMPError).value))
        self.assertTrue(transport.disconnecting)
        third = Deferred.fromCoroutine(machine.qmp("cont"))
        self.assertEqual(len(reactor.unixClients), 2)
        protocol, transport = self.accept(reactor, 1)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n{"return": {}}\n')
        self.assertEqual(self.successResultOf(third), {})

    def test_refused_after_exit(self) -> None:
        """A connection refused once QEMU has ended fails the caller at once (no retry)."""
        from twisted.internet.error import ConnectionRefusedError

        from vmservice.hypervisors.qmp import QMPError

        reactor, machine = self.machine()
        d = Deferred.fromCoroutine(machine.qmp("query-status"))
        reactor.spawned[-1][0].processEnded(Failure(ProcessTerminated(None, 9, None)))
        factory = reactor.unixClients[0][1]
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        self.assertIn("cannot reach QMP", str(self.failureResultOf(d, QMPError).value))
        self.assertEqual(len(reactor.unixClients), 1)
        self.assertIn("not running", str(self.failureResultOf(Deferred.fromCoroutine(machine.qmp("stop")), QMPError).value))

    def test_load_over_the_wire(self) -> None:
        """
        The whole load on one QMP connection: the capabilities, getfd with the open state file
        passed along its bytes, migrate-incoming from that descriptor; QEMU's RESUME, on the same
        connection, ends it.
        """

        reactor, machine = self.machine()
        state = os.path.abspath(self.mktemp())
        with open(state, "wb") as f:
            f.write(b"QEVM")
        d = machine.load_device_state(state)
        address, factory, timeout, check_pid = reactor.unixClients[0]
        protocol = factory.buildProtocol(None)
        transport = DescriptorTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n{"return": {}}\n')
        protocol.dataReceived(b'{"return": {}}\n')
        getfd = transport.value().index(b'{"execute": "getfd"')
        self.assertEqual(transport.descriptors, [(getfd, state)])
        protocol.dataReceived(b'{"return": {}}\n')
        self.assertEqual(self.sent(transport), ["qmp_capabilities", "migrate-set-capabilities", "getfd", "migrate-incoming"])
        self.assertNoResult(d)
        protocol.dataReceived(b'{"event": "MIGRATION", "data": {"status": "active"}}\n')
        self.assertNoResult(d)
        protocol.dataReceived(b'{"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 2}}\n')
        self.successResultOf(d)
        self.assertEqual(len(reactor.unixClients), 1)

    def test_load_refused(self) -> None:
        """A command of the load that QEMU refuses fails the load, naming the command and QEMU's reason."""
        from vmservice.hypervisors.base import HypervisorError

        reactor, machine = self.machine()
        state = os.path.abspath(self.mktemp())
        with open(state, "wb") as f:
            f.write(b"QEVM")
        d = machine.load_device_state(state)
        protocol = reactor.unixClients[0][1].buildProtocol(None)
        transport = DescriptorTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n{"return": {}}\n{"return": {}}\n')
        self.assertEqual(self.sent(transport)[-1], "migrate-incoming")
        protocol.dataReceived(b'{"error": {"class": "GenericError", "desc": "No file descriptor named state"}}\n')
        failure = self.failureResultOf(d, HypervisorError)
        self.assertEqual(str(failure.value),
                         "loading the VM state: migrate-incoming: GenericError: No file descriptor named state")
        self.assertEqual(machine.monitor.watchers, [])

    def test_missing_socket_retried(self) -> None:
        """A socket QEMU has not made yet is tried again every POLL seconds while QEMU runs."""
        from twisted.internet.error import ConnectError

        reactor, machine = self.machine()
        d = Deferred.fromCoroutine(machine.qmp("query-status"))
        reactor.unixClients[0][1].clientConnectionFailed(None, Failure(ConnectError("no such file")))
        self.assertEqual(len(reactor.unixClients), 1)
        reactor.advance(machine.POLL)
        self.assertEqual(len(reactor.unixClients), 2)
        protocol, transport = self.accept(reactor, 1)
        protocol.dataReceived(b'{"QMP": {}}\n{"return": {}}\n{"return": {"status": "paused"}}\n')
        self.assertEqual(self.successResultOf(d), {"status": "paused"})
