# -*- test-case-name: tests.agent.test_execution,tests.nodes.test_fakes -*-
"""
One command run in a node's guest (:meth:`vmservice.guestport.guest.IGuest.exec`):
the request, the sink that receives what happens to it, and the running
process as its caller holds it.
"""

from __future__ import annotations

from twisted.internet.interfaces import IPushProducer
from zope.interface import Interface

from vmservice.wire.openheaders.exec import ExecHeader

from ..errors import AgentError


#: One command to run in the guest: the exec stream's OPEN header itself, so
#: its fields and their checks are written once (see
#: :class:`~vmservice.wire.openheaders.exec.ExecHeader`).
ExecRequest = ExecHeader


class IExecSink(Interface):
    """
    Receives what happens to one exec, in order.  Exactly one of
    :meth:`exited`, :meth:`failed` or :meth:`lost` ends it.
    """

    def started(pid: int) -> None:
        """The process runs with ``pid`` (in the guest)."""

    def output(name: str, data: bytes) -> None:
        """The process wrote ``data`` on ``name`` (``stdout`` or ``stderr``)."""

    def exited(exit_code: int, signal: str | None) -> None:
        """The process ended; ``signal`` names the one that killed it, if any."""

    def failed(message: str, exit_code: int) -> None:
        """The process could not be started (127: not found, 126: otherwise)."""

    def lost(error: AgentError) -> None:
        """
        The exec ended without a last record: the guest refused the request
        before starting anything (kind ``REJECTED``: a bad ``cwd`` ...), the
        stream was reset, the agent went away.
        """


class IExecProcess(IPushProducer):
    """
    A running exec, as the caller sees it.  As an ``IPushProducer`` it
    controls the *output*: pausing it withholds credit from the guest, which
    stops reading the process's pipes, which blocks the process;
    ``stopProducing`` kills it.
    """

    def write_stdin(data: bytes) -> None:
        """Send ``data`` to the process's stdin (buffered until the guest takes it)."""

    def close_stdin() -> None:
        """EOF on stdin, after what was written."""

    def register_stdin_producer(producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take stdin."""

    def unregister_stdin_producer() -> None:
        """Forget the stdin producer."""

    def kill() -> None:
        """The guest kills the process group (SIGTERM, then SIGKILL)."""
