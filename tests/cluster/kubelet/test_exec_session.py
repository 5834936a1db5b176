"""Tests for :mod:`vmservice.cluster.kubelet.exec_session` and :mod:`.exec_socket`: an exec's session and socket."""

from __future__ import annotations

import json
from typing import Any, Optional

from twisted.internet.interfaces import IConsumer
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster.kubelet.fakes import FakeExecGuest, FakeProcess
from tests.diagrams import drawn_transitions, machine_transitions
from vmservice.cluster.kubelet import channels, status
from vmservice.cluster.kubelet.exec_session import SESSION_MACHINE
from vmservice.cluster.kubelet.exec_socket import ExecProtocol, exec_request
from vmservice.cluster.kubelet.exec_terminal import terminal_shell
from vmservice.cluster.kubelet.params import ExecQuery
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.shell import ShellRequest


def opened(socket: ExecProtocol) -> list[Any]:
    """Open ``socket`` as autobahn leaves it (a StringTransport whose producer is the HTTP channel's); what it sends."""
    sent: list[Any] = []
    socket.state = socket.STATE_OPEN
    transport = StringTransport()
    transport.registerProducer(FakeProcess(), True)
    socket.transport = transport
    socket.sendMessage = lambda payload, isBinary=False: sent.append(payload)  # type: ignore[method-assign]
    socket.sendClose = lambda code=None, reason=None: sent.append(("close", code))  # type: ignore[method-assign]
    socket.onOpen()
    return sent


def open_socket(query: ExecQuery, protocol: str = channels.V5) -> tuple[ExecProtocol, FakeExecGuest, list[Any]]:
    """An open ExecProtocol of ``query`` on a FakeExecGuest, and what it sends."""
    guest = FakeExecGuest()
    socket = ExecProtocol(guest, query, protocol)  # type: ignore[arg-type]
    return socket, guest, opened(socket)


def status_of(sent: list[Any]) -> Optional[dict[str, Any]]:
    for message in sent:
        if isinstance(message, bytes) and message[:1] == b"\x03" and len(message) > 1:
            found: dict[str, Any] = json.loads(message[1:])
            return found
    return None


ALL = ExecQuery(("sh", "-c", "cat"), stdin=True, stdout=True, stderr=True)


class MachineTests(SynchronousTestCase):
    def test_diagram(self) -> None:
        """docs/state-machines/kubelet-exec.dot draws exactly the machine's transitions."""
        self.assertEqual(drawn_transitions("kubelet-exec.dot"), machine_transitions(SESSION_MACHINE))


class RequestTests(SynchronousTestCase):
    def test_argv_no_shell(self) -> None:
        """The command runs as argv, without a shell, with the streams asked for."""
        request = exec_request(ExecQuery(("ls", "-l", "/a b"), stdout=True))
        self.assertEqual((request.cmd, request.args, request.shell, request.stdin, request.stdout, request.stderr),
                         ("ls", ("-l", "/a b"), "", False, True, False))

    def test_tty_merges_stderr(self) -> None:
        """With tty (kubectl asks no stderr then) stderr is asked for, to go out on stdout."""
        self.assertTrue(exec_request(ExecQuery(("sh",), stdin=True, stdout=True, tty=True)).stderr)


class SocketTests(SynchronousTestCase):
    def test_open(self) -> None:
        """Opening sends an empty stdout message and starts the command; output is the socket's producer."""
        socket, guest, sent = open_socket(ALL)
        self.assertEqual(sent, [b"\x01"])
        self.assertEqual(len(guest.requests), 1)
        assert socket.transport is not None
        producer = IConsumer(socket.transport).producer  # type: ignore[attr-defined]
        producer.pauseProducing()
        producer.resumeProducing()
        self.assertEqual(guest.process.calls, ["pause", "resume"])
        self.assertIsNotNone(guest.process.stdin_producer)

    def test_first_message_on_stderr_or_error(self) -> None:
        """Without stdout the first empty message is stderr's, without either the error channel's."""
        self.assertEqual(open_socket(ExecQuery(("x",), stderr=True))[2], [b"\x02"])
        self.assertEqual(open_socket(ExecQuery(("x",), stdin=True))[2], [b"\x03"])

    def test_output_and_success(self) -> None:
        """stdout and stderr on their channels; exit 0 sends Success and closes 1000."""
        socket, guest, sent = open_socket(ALL)
        assert guest.sink is not None
        guest.sink.started(7)
        guest.sink.output("stdout", b"hi\n")
        guest.sink.output("stderr", b"oops\n")
        guest.sink.exited(0, None)
        self.assertEqual(sent[1:3], [b"\x01hi\n", b"\x02oops\n"])
        self.assertEqual(status_of(sent), {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                           "status": "Success"})
        self.assertEqual(sent[-1], ("close", 1000))

    def test_non_zero_exit(self) -> None:
        """A non-zero exit is NonZeroExitCode with the code as the ExitCode cause."""
        socket, guest, sent = open_socket(ALL)
        assert guest.sink is not None
        guest.sink.exited(3, None)
        found = status_of(sent)
        assert found is not None
        self.assertEqual((found["reason"], found["details"]["causes"][0]), ("NonZeroExitCode",
                                                                           {"reason": "ExitCode", "message": "3"}))

    def test_killed_and_not_started(self) -> None:
        """A signal without a code is exit 1; a command that could not start gives its 127/126."""
        socket, guest, sent = open_socket(ALL)
        assert guest.sink is not None
        guest.sink.exited(0, "SIGKILL")
        found = status_of(sent)
        assert found is not None
        self.assertEqual(found["details"]["causes"][0]["message"], "1")
        socket, guest, sent = open_socket(ALL)
        assert guest.sink is not None
        guest.sink.failed("no such file: nosuch", 127)
        found = status_of(sent)
        assert found is not None
        self.assertEqual((found["message"], found["details"]["causes"][0]["message"]), ("no such file: nosuch", "127"))

    def test_lost(self) -> None:
        """A lost exec is an InternalError Status."""
        socket, guest, sent = open_socket(ALL)
        assert guest.sink is not None
        guest.sink.lost(AgentError(GuestErrorKind.UNAVAILABLE, "gone"))
        found = status_of(sent)
        assert found is not None
        self.assertEqual(found["reason"], "InternalError")

    def test_stdin_and_close(self) -> None:
        """Channel 0 feeds stdin; v5's close of channel 0 is EOF, after which stdin is dropped."""
        socket, guest, sent = open_socket(ALL)
        socket.onMessage(b"\x00abc", True)
        socket.onMessage(b"\xff\x00", True)
        socket.onMessage(b"\x00late", True)
        self.assertEqual(guest.process.stdin, b"abc")
        self.assertEqual(guest.process.calls, ["eof"])

    def test_stdin_not_asked(self) -> None:
        """Without stdin=1 stdin bytes are dropped."""
        socket, guest, sent = open_socket(ExecQuery(("x",), stdout=True))
        socket.onMessage(b"\x00abc", True)
        self.assertEqual(guest.process.stdin, b"")
        self.assertFalse(guest.requests[0].stdin)

    def test_client_leaves(self) -> None:
        """The socket closing before the end kills the command; its later end sends nothing."""
        socket, guest, sent = open_socket(ALL)
        socket.onClose(False, 1006, None)
        self.assertIn("kill", guest.process.calls)
        assert guest.sink is not None
        guest.sink.exited(0, None)
        self.assertIsNone(status_of(sent))

    def test_tty_output(self) -> None:
        """With tty stderr goes out on stdout; a resize is taken (and ignored without a terminal)."""
        socket, guest, sent = open_socket(ExecQuery(("ls", "-l"), stdin=True, stdout=True, tty=True))
        socket.onMessage(b'\x04{"Width":100,"Height":30}', True)
        socket.onMessage(b"\x04nonsense", True)
        assert guest.sink is not None
        guest.sink.output("stderr", b"$ ")
        self.assertEqual(sent[1:], [b"\x01$ "])

    def test_slow_stdin_pauses_the_socket(self) -> None:
        """The stdin producer the guest pauses is the socket's reading."""
        socket, guest, sent = open_socket(ALL)
        assert guest.process.stdin_producer is not None
        guest.process.stdin_producer.pauseProducing()
        assert isinstance(socket.transport, StringTransport)
        self.assertEqual(socket.transport.producerState, "paused")
        guest.process.stdin_producer.resumeProducing()
        self.assertEqual(socket.transport.producerState, "producing")

    def test_agent_refuses(self) -> None:
        """An exec the guest refuses at once ends the session with an InternalError Status."""
        guest = FakeExecGuest()

        def refuse(request: Any, sink: Any) -> Any:
            raise AgentError(GuestErrorKind.UNAVAILABLE, "not connected")

        guest.exec = refuse  # type: ignore[method-assign]
        sent = opened(ExecProtocol(guest, ALL, channels.V5))  # type: ignore[arg-type]
        found = status_of(sent)
        assert found is not None
        self.assertEqual(found["reason"], "InternalError")

    def test_terminal_shell_chosen(self) -> None:
        """tty=1 and one shell, by name or absolute path: a terminal; anything else: none."""
        self.assertEqual(terminal_shell(ExecQuery(("sh",), stdout=True, tty=True)), "/bin/sh")
        self.assertEqual(terminal_shell(ExecQuery(("/usr/bin/bash",), stdout=True, tty=True)), "/usr/bin/bash")
        for command, tty in ((("sh",), False), (("sh", "-c", "ls"), True), (("top",), True),
                             (("/bin/../tmp/sh",), True), (("./sh",), True)):
            self.assertIsNone(terminal_shell(ExecQuery(command, stdout=True, tty=tty)))

    def test_terminal(self) -> None:
        """A shell on a terminal: typing, resizes, output on stdout, EOF as Ctrl-D, its exit as the Status."""
        socket, guest, sent = open_socket(ExecQuery(("bash",), stdin=True, stdout=True, tty=True))
        self.assertEqual(guest.requests, [ShellRequest(shell="/bin/bash")])
        socket.onMessage(b"\x00ls\r", True)
        socket.onMessage(b'\x04{"Width":100,"Height":30}', True)
        socket.onMessage(b'\x04{"Width":0,"Height":0}', True)
        guest.sink.output(b"$ ")
        socket.onMessage(b"\xff\x00", True)
        guest.sink.exited(0, None)
        session = guest.shell_session
        self.assertEqual((session.stdin, session.calls), (b"ls\r\x04", [("resize", 100, 30)]))
        self.assertEqual(sent[1], b"\x01$ ")
        self.assertEqual(status_of(sent), json.loads(status.exec_success()))

    def test_terminal_hung_up(self) -> None:
        """The client gone hangs the terminal's shell up; a shell lost is an InternalError."""
        socket, guest, sent = open_socket(ExecQuery(("sh",), stdin=True, stdout=True, tty=True))
        socket.onClose(False, 1006, None)
        self.assertIn("hangup", guest.shell_session.calls)
        socket, guest, sent = open_socket(ExecQuery(("sh",), stdin=True, stdout=True, tty=True))
        guest.sink.lost(AgentError(GuestErrorKind.UNAVAILABLE, "gone"))
        found = status_of(sent)
        assert found is not None
        self.assertEqual(found["reason"], "InternalError")

    def test_v4_has_no_close(self) -> None:
        """Under v4 a 255 message is no close."""
        socket, guest, sent = open_socket(ALL, channels.V4)
        socket.onMessage(b"\xff\x00", True)
        self.assertEqual(guest.process.calls, [])
