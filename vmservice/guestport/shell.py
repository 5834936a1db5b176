# -*- test-case-name: tests.agent.test_shell,tests.api.test_shell_bridge -*-
"""
Interactive shells in a node's guest (:meth:`vmservice.guestport.guest.IGuest.shell`):
the request, the sink of what the shell does, and the running session.
"""

from __future__ import annotations

from twisted.internet.interfaces import IPushProducer
from zope.interface import Interface

from vmservice.wire.openheaders.shell import ShellHeader

from ..errors import AgentError


#: An interactive login shell on a terminal in the guest: the shell stream's
#: OPEN header itself, so its fields and their checks are written once (see
#: :class:`~vmservice.wire.openheaders.shell.ShellHeader`).
ShellRequest = ShellHeader


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
