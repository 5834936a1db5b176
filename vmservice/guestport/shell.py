# -*- test-case-name: tests.agent.test_shell,tests.api.test_shell_bridge -*-
"""
Interactive shells in a node's guest (:meth:`vmservice.guestport.guest.IGuest.shell`):
the request, the sink of what the shell does, and the running session.
"""

from __future__ import annotations

from attrs import frozen
from twisted.internet.interfaces import IPushProducer
from zope.interface import Interface

from ..errors import AgentError


@frozen
class ShellRequest:
    """
    An interactive login shell on a terminal in the guest.

    :ivar uid: user id (0 = root).
    :ivar gid: group id.
    :ivar shell: the shell program, run as ``shell -l``.
    :ivar cwd: working directory (as :class:`ExecRequest`'s; empty = the user's home).
    :ivar cols: the terminal's width at start.
    :ivar rows: the terminal's height at start.
    """

    uid: int = 0
    gid: int = 0
    shell: str = "/bin/bash"
    cwd: str = ""
    cols: int = 80
    rows: int = 24


class IShellSink(Interface):
    """
    Receives what happens to one shell, in order: :meth:`started` (or
    :meth:`lost`), terminal output, then exactly one of :meth:`exited` or :meth:`lost`.
    """

    def started(pid: int) -> None:
        """The shell runs with ``pid`` (in the guest)."""

    def output(data: bytes) -> None:
        """The terminal wrote ``data``."""

    def exited(exit_code: int, signal: str | None) -> None:
        """The shell ended and its output was delivered."""

    def lost(error: AgentError) -> None:
        """
        The shell ended otherwise: refused before it started (kind ``REJECTED``:
        a bad ``cwd`` or shell), hung up, the stream reset, the agent gone.
        """


class IShellSession(IPushProducer):
    """
    A running shell.  As an ``IPushProducer`` it controls the terminal's
    *output*: pausing withholds credit from the guest, which stops reading
    the terminal, which blocks the programs writing to it; ``stopProducing``
    hangs up.
    """

    def write(data: bytes) -> None:
        """Type ``data`` into the terminal (buffered until the guest takes it)."""

    def resize(cols: int, rows: int) -> None:
        """Set the terminal's size (the foreground program gets SIGWINCH)."""

    def register_input_producer(producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take input."""

    def unregister_input_producer() -> None:
        """Forget the input producer."""

    def hangup() -> None:
        """End the session: the guest sends SIGHUP to it, then SIGKILL."""
