# -*- test-case-name: tests.agent.test_background -*-
"""
Background execs of a guest, as the domain sees them: processes that run in
the guest on their own, whose output the guest keeps in a bounded ring that
clients replay and follow (``IGuest.background``).

The processes and their rings live in the guest (see
:mod:`vmservice.guest.background`), so they outlive the HTTP request that
started them, the daemon itself and a suspend; these are the records and the
interface through which the API reaches them.  Times are the guest's wall
clock (the daemon sets it at boot, resume and restore), in nanoseconds since
the Unix epoch.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from zope.interface import Interface

from ..errors import AgentError
from .exec import ExecRequest


@frozen
class BackgroundRequest:
    """
    A command to start in the background.

    :ivar exec: what to run (stdin is ``/dev/null``; both outputs go to the ring).
    :ivar ring_bytes: most output bytes the ring keeps.
    """

    exec: ExecRequest
    ring_bytes: int


@frozen
class BackgroundInfo:
    """
    One background exec as the guest reports it.

    :ivar exec_id: ``ex_`` and hexadecimal digits.
    :ivar pid: the process in the guest.
    :ivar command: the ``cmd`` it was started with.
    :ivar args: its ``args``.
    :ivar cwd: the working directory it was started in.
    :ivar uid: its user id.
    :ivar gid: its group id.
    :ivar started_ns: when it started.
    :ivar running: whether it still runs (its output may still come).
    :ivar exit_code: how it ended (128 + N when killed by signal N), ``None`` while running.
    :ivar signal: the signal that ended it, if any.
    :ivar ended_ns: when it ended, ``None`` while running.
    :ivar bytes_written: output bytes it wrote so far.
    :ivar bytes_dropped: output bytes evicted from the ring.
    :ivar next_id: the id the next frame of its log gets.
    :ivar ring_bytes: the ring's size.
    """

    exec_id: str
    pid: int
    command: str
    args: tuple[str, ...]
    cwd: str
    uid: int
    gid: int
    started_ns: int
    running: bool
    exit_code: Optional[int]
    signal: Optional[str]
    ended_ns: Optional[int]
    bytes_written: int
    bytes_dropped: int
    next_id: int
    ring_bytes: int


@frozen
class KillOutcome:
    """
    What a kill did.

    :ivar signal_sent: the signal sent (``TERM`` ...), ``""`` when the exec had already ended.
    """

    exec_id: str
    pid: int
    running: bool
    signal_sent: str


@frozen
class WaitOutcome:
    """
    Where a wait for the end of an exec stopped.

    :ivar timed_out: the exec still runs: the wait ran out of time.
    """

    exec_id: str
    running: bool
    exit_code: Optional[int]
    signal: Optional[str]
    ended_ns: Optional[int]
    timed_out: bool


@frozen
class LogFrame:
    """
    One frame of a background exec's log.

    :ivar kind: ``stdout``, ``stderr``, ``exit`` or ``gap``.
    :ivar id: its place in the log, from 1 (0 for a gap, which is not part of the log).
    :ivar time_ns: when the guest made it.
    :ivar data: the output (``stdout``/``stderr``).
    :ivar exit_code: how the process ended (``exit``).
    :ivar signal: the signal that ended it (``exit``), if any.
    :ivar dropped_frames: frames the reader missed (``gap``).
    :ivar dropped_bytes: output bytes the reader missed (``gap``).
    """

    kind: str
    id: int
    time_ns: int
    data: bytes = b""
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    dropped_frames: int = 0
    dropped_bytes: int = 0


class ILogSink(Interface):
    """
    Receives one reading of a background exec's log, in order: :meth:`opened`
    or :meth:`lost` first; after :meth:`opened`, frames, then :meth:`ended`
    or :meth:`lost`.
    """

    def opened(info: BackgroundInfo) -> None:
        """The exec exists; its frames follow."""

    def frame(frame: LogFrame) -> None:
        """The next frame."""

    def ended() -> None:
        """Everything asked for was sent (the ring was drained, or the exec ended)."""

    def lost(error: AgentError) -> None:
        """The reading failed: no such exec (before :meth:`opened`), the agent went away ..."""


class IBackgroundExecs(Interface):
    """
    The background execs of one guest.  Every method fails with an
    :class:`~vmservice.errors.AgentError`: ``NOT_FOUND`` for an unknown id,
    ``GONE`` for a deleted one, ``RUNNING`` when deleting a running one,
    ``BUSY`` when the guest keeps too many, ``REJECTED`` when it cannot start.
    """

    def start(request: BackgroundRequest) -> Deferred[BackgroundInfo]:
        """Start ``request`` and answer once it runs."""

    def listing() -> Deferred[list[BackgroundInfo]]:
        """Every exec the guest keeps (running, or ended and not deleted)."""

    def info(exec_id: str) -> Deferred[BackgroundInfo]:
        """One exec."""

    def kill(exec_id: str, signal: str, grace_ms: int) -> Deferred[KillOutcome]:
        """
        Send ``signal`` to the exec's process group; a terminating one is
        followed by ``KILL`` after ``grace_ms`` if the exec still runs.
        """

    def wait(exec_id: str, timeout_ms: int) -> Deferred[WaitOutcome]:
        """Answer when the exec has ended, or after ``timeout_ms``."""

    def delete(exec_id: str) -> Deferred[None]:
        """Forget an exec that has ended (its log with it)."""

    def logs(exec_id: str, from_id: int, follow: bool, sink: ILogSink) -> IPushProducer:
        """
        Read the exec's log from frame ``from_id`` (0: the oldest kept) into
        ``sink``; with ``follow``, until the exec ends.  Pausing the producer
        holds the frames back (the guest's ring goes on filling, and evicts
        what the reader has not read); stopping it ends the reading.
        """


__all__ = [
    "BackgroundInfo",
    "BackgroundRequest",
    "IBackgroundExecs",
    "ILogSink",
    "KillOutcome",
    "LogFrame",
    "WaitOutcome",
]
