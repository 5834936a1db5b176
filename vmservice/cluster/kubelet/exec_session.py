# -*- test-case-name: tests.cluster.kubelet.test_exec_session -*-
"""
One ``kubectl exec`` joined to its command in the VM, as one automat machine
(diagram: ``docs/state-machines/kubelet-exec.dot``).

The WebSocket is open when the session begins (the command starts then), so
the machine tracks the half-closes of the two directions and the end:

- **Open**: stdin flows to the command, its output to the client.  The
  client's close of channel 0 (``close_stdin``) → InputClosed, the command's
  stdin half-closed (EOF).
- **InputClosed**: output still flows; more stdin is dropped.
- Either way the command's end (``ended``) → **Ended**: its Status goes out on
  channel 3 and the socket closes (1000); the client's leaving
  (``socket_closed``) → **Gone**: the command is killed.
- **Ended** and **Gone** ignore everything.

Output is a transition of its own (``output``) because where it may go
depends on the state; resizes reach the command in Open and InputClosed.
"""

from __future__ import annotations

from typing import Optional, Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder


class Command(Protocol):
    """The command in the VM, as the session drives it."""

    def write_stdin(self, data: bytes) -> None:
        """Bytes for its stdin (buffered until the guest takes them)."""

    def close_stdin(self) -> None:
        """EOF on its stdin, after what was written."""

    def resize(self, width: int, height: int) -> None:
        """Its terminal's new size (nothing without a terminal)."""

    def kill(self) -> None:
        """End it: the client went away."""


class Socket(Protocol):
    """The client's WebSocket, as the session writes to it."""

    def send(self, channel: int, data: bytes) -> None:
        """``data`` on ``channel``."""

    def finish(self, status: bytes) -> None:
        """The exec's Status on the error channel, then the close handshake (1000)."""


class SessionInputs(Protocol):
    """What happens to one exec session."""

    def output(self, channel: int, data: bytes) -> None:
        """The command wrote ``data`` on ``channel`` (stdout or stderr)."""

    def stdin(self, data: bytes) -> None:
        """The client sent stdin bytes."""

    def close_stdin(self) -> None:
        """The client closed channel 0."""

    def resize(self, width: int, height: int) -> None:
        """The client's terminal changed size."""

    def ended(self, status: bytes) -> None:
        """The command ended (or was lost); ``status`` is its Status."""

    def socket_closed(self) -> None:
        """The WebSocket closed before the end."""


@define
class SessionCore:
    """What every state shares: the command, the socket, and what the session read of stdin."""

    command: Command
    socket: Socket
    stdin_bytes: int = 0
    status: Optional[bytes] = None


def _forward(inputs: SessionInputs, core: SessionCore, channel: int, data: bytes) -> None:
    core.socket.send(channel, data)


def _write(inputs: SessionInputs, core: SessionCore, data: bytes) -> None:
    core.stdin_bytes += len(data)
    core.command.write_stdin(data)


def _eof(inputs: SessionInputs, core: SessionCore) -> None:
    core.command.close_stdin()


def _resize(inputs: SessionInputs, core: SessionCore, width: int, height: int) -> None:
    core.command.resize(width, height)


def _finish(inputs: SessionInputs, core: SessionCore, status: bytes) -> None:
    core.status = status
    core.socket.finish(status)


def _kill(inputs: SessionInputs, core: SessionCore) -> None:
    core.command.kill()


def _build() -> TypeMachine[SessionInputs, SessionCore]:
    builder = TypeMachineBuilder(SessionInputs, SessionCore)
    open_ = builder.state("Open")
    input_closed = builder.state("InputClosed")
    ended = builder.state("Ended")
    gone = builder.state("Gone")

    for flowing in (open_, input_closed):
        flowing.upon(SessionInputs.output).loop()(_forward)
        flowing.upon(SessionInputs.resize).loop()(_resize)
        flowing.upon(SessionInputs.ended).to(ended)(_finish)
        flowing.upon(SessionInputs.socket_closed).to(gone)(_kill)
    open_.upon(SessionInputs.stdin).loop()(_write)
    open_.upon(SessionInputs.close_stdin).to(input_closed)(_eof)
    input_closed.upon(SessionInputs.stdin).loop().returns(None)
    input_closed.upon(SessionInputs.close_stdin).loop().returns(None)

    every = (SessionInputs.output, SessionInputs.stdin, SessionInputs.close_stdin, SessionInputs.resize,
             SessionInputs.ended, SessionInputs.socket_closed)
    for over in (ended, gone):
        for each in every:
            over.upon(each).loop().returns(None)
    return builder.build()


#: The machine; calling it with a core gives one session's inputs.
SESSION_MACHINE = _build()


def session(command: Command, socket: Socket) -> SessionInputs:
    """A new session of ``command`` on ``socket``, Open."""
    return SESSION_MACHINE(SessionCore(command, socket))


__all__ = ["SESSION_MACHINE", "Command", "SessionCore", "SessionInputs", "Socket", "session"]
