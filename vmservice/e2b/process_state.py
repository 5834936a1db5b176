# -*- test-case-name: tests.e2b.test_process_state -*-
"""
One process started through a sandbox's data plane, as the host keeps it:
an automat machine (diagram: ``docs/state-machines/e2b-process.dot``) over
its life in the guest and the streams subscribed to it.

- **Starting**: the guest was asked to run it.  Streams that subscribe
  (the ``Start`` that asked) wait for its start event; a refusal fails them.
- **Running**: it has a pid.  A stream that subscribes gets the start event
  first, then what happens from then on (output with no subscriber is
  dropped: nothing is replayed); every stream gets a keepalive after
  :data:`KEEPALIVE_SECONDS` without a message.
- **Killing**: a client sent it a signal; the guest ends it (the stream to
  the guest is reset: SIGTERM or SIGHUP, then SIGKILL), and the loss of
  that stream is its end: every stream gets an end event for the signal.
- **Ended**: it exited (every stream gets its end event and ends), or its
  guest was lost or its sandbox forgotten (the process is killed, every
  stream's connection is broken: the stream did not end, it broke).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Protocol

from automat import TypeMachine, TypeMachineBuilder
from automat._typed import TypedState  # the type of a builder's states, not exported
from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from .connect import Code, ConnectError
from .data_plane import MessageSink
from .envd_failures import connect_error_of
from .process_messages import data_event, end_event, keepalive_event, start_event

#: Seconds a process's stream may go without a message before it gets a keepalive (what the SDKs ask for).
KEEPALIVE_SECONDS = 50.0


class ProcessControls(Protocol):
    """What acts on a process in the guest."""

    def write(self, name: str, data: bytes) -> None:
        """Send ``data`` to its ``stdin`` or its terminal (``pty``)."""

    def close_stdin(self) -> None:
        """End its stdin."""

    def resize(self, cols: int, rows: int) -> None:
        """Set its terminal's size."""

    def kill(self) -> None:
        """End it (the guest sends SIGTERM or SIGHUP, then SIGKILL)."""


class ProcessLife(Protocol):
    """The inputs of a process's machine."""

    def started(self, pid: int) -> None:
        """The guest runs it with ``pid``."""

    def output(self, name: str, data: bytes) -> None:
        """It wrote ``data`` on ``name`` (``stdout``, ``stderr`` or ``pty``)."""

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        """It ended; ``signal`` names the one that killed it."""

    def failed(self, message: str) -> None:
        """The guest could not run it."""

    def lost(self, error: Exception) -> None:
        """Its guest is gone (the stream reset, the agent lost, the node suspended or deleted)."""

    def forget(self) -> None:
        """Its sandbox is gone: kill it and break its streams."""

    def kill(self, signal: str) -> None:
        """A client sent it ``signal`` (``SIGTERM`` or ``SIGKILL``): end it."""

    def subscribe(self, sink: MessageSink) -> "Deferred[None]":
        """Send its events to ``sink``; fires once its stream is over (fails when it could not start)."""

    def unsubscribe(self, sink: MessageSink) -> None:
        """Stop sending to ``sink`` (its client went away)."""


class _Subscription:
    """One stream subscribed to a process, with its keepalive timer."""

    def __init__(self, core: ProcessCore, sink: MessageSink) -> None:
        self.sink, self.done = sink, Deferred[None]()
        self._core, self._timer = core, core.clock.callLater(core.keepalive, self._keepalive)

    def send(self, message: Mapping[str, Any]) -> None:
        self.sink.send(message)
        if self._timer.active():
            self._timer.reset(self._core.keepalive)

    def _keepalive(self) -> None:
        self.sink.send(keepalive_event())
        self._timer = self._core.clock.callLater(self._core.keepalive, self._keepalive)

    def close(self) -> Deferred[None]:
        if self._timer.active():
            self._timer.cancel()
        return self.done


class ProcessCore:
    """
    What a process's machine acts with.

    :ivar clock: the keepalive timers' clock.
    :ivar controls: what acts on it in the guest (set once the guest was asked).
    :ivar on_running: told its pid once it runs (the table indexes it).
    :ivar on_ended: told once it ended (the table drops it, its sandbox's idle timer runs again).
    :ivar keepalive: seconds between keepalives.
    :ivar pid: its pid once it runs.
    """

    def __init__(self, clock: IReactorTime, on_running: Callable[[int], None], on_ended: Callable[[], None],
                 keepalive: float = KEEPALIVE_SECONDS) -> None:
        self.clock, self.on_running, self.on_ended, self.keepalive = clock, on_running, on_ended, keepalive
        self.controls: Optional[ProcessControls] = None
        self.pid: Optional[int] = None
        self.signal: Optional[str] = None
        self._subscriptions: dict[int, _Subscription] = {}

    def add(self, sink: MessageSink) -> Deferred[None]:
        subscription = _Subscription(self, sink)
        self._subscriptions[id(sink)] = subscription
        if self.pid is not None:
            subscription.send(start_event(self.pid))
        return subscription.done

    def remove(self, sink: MessageSink) -> None:
        subscription = self._subscriptions.pop(id(sink), None)
        if subscription is not None:
            subscription.close()

    def send(self, message: Mapping[str, Any]) -> None:
        for subscription in list(self._subscriptions.values()):
            subscription.send(message)

    def end(self, abort: bool = False, error: Optional[Exception] = None) -> None:
        """Every stream over: ended (``abort``: broken, ``error``: failed with it); the table told."""
        subscriptions, self._subscriptions = list(self._subscriptions.values()), {}
        for subscription in subscriptions:
            if abort:
                subscription.sink.abort()
            done = subscription.close()
            if not done.called:
                if error is None:
                    done.callback(None)
                else:
                    done.errback(connect_error_of(error))
        self.on_ended()

    def kill(self) -> None:
        if self.controls is not None:
            self.controls.kill()


#: A state of this machine, as the builder makes it.
_State = TypedState[ProcessLife, ProcessCore]


def _build() -> TypeMachine[ProcessLife, ProcessCore]:
    builder = TypeMachineBuilder(ProcessLife, ProcessCore)
    starting, running, ended = builder.state("Starting"), builder.state("Running"), builder.state("Ended")
    killing = builder.state("Killing")
    _subscriptions(starting, running, killing, ended)
    _starting(starting, running, ended)
    _running(running, killing, ended)
    _killing(killing, ended)
    for state in (starting, running, killing):
        @state.upon(ProcessLife.forget).to(ended)
        def forget(life: ProcessLife, core: ProcessCore) -> None:
            core.kill()
            core.end(abort=True)
    for input in (ProcessLife.started, ProcessLife.output, ProcessLife.exited, ProcessLife.failed,
                  ProcessLife.lost, ProcessLife.forget, ProcessLife.kill):
        ended.upon(input).loop().returns(None)
    return builder.build()


def _subscriptions(starting: _State, running: _State, killing: _State, ended: _State) -> None:
    """Streams come and go while it starts or runs; none subscribes to an ended one."""
    for state in (starting, running, killing):
        @state.upon(ProcessLife.subscribe).loop()
        def subscribe(life: ProcessLife, core: ProcessCore, sink: MessageSink) -> Deferred[None]:
            return core.add(sink)

        @state.upon(ProcessLife.unsubscribe).loop()
        def unsubscribe(life: ProcessLife, core: ProcessCore, sink: MessageSink) -> None:
            core.remove(sink)

    @ended.upon(ProcessLife.subscribe).loop()
    def subscribe_ended(life: ProcessLife, core: ProcessCore, sink: MessageSink) -> Deferred[None]:
        return fail(ConnectError(Code.NOT_FOUND, "the process has ended"))

    ended.upon(ProcessLife.unsubscribe).loop().returns(None)


def _starting(starting: _State, running: _State, ended: _State) -> None:
    """The guest runs it, or refuses it (the streams fail), or is lost."""

    @starting.upon(ProcessLife.started).to(running)
    def started(life: ProcessLife, core: ProcessCore, pid: int) -> None:
        core.pid = pid
        core.on_running(pid)
        core.send(start_event(pid))

    starting.upon(ProcessLife.output).loop().returns(None)
    starting.upon(ProcessLife.kill).loop().returns(None)  # not found by a client before its start

    @starting.upon(ProcessLife.exited).to(ended)
    def exited_unstarted(life: ProcessLife, core: ProcessCore, exit_code: int, signal: Optional[str]) -> None:
        core.end(error=ConnectError(Code.INTERNAL, "the process ended before it started"))

    @starting.upon(ProcessLife.failed).to(ended)
    def failed(life: ProcessLife, core: ProcessCore, message: str) -> None:
        core.end(error=ConnectError(Code.INVALID_ARGUMENT, f"error starting process: {message[:1000]}"))

    @starting.upon(ProcessLife.lost).to(ended)
    def refused(life: ProcessLife, core: ProcessCore, error: Exception) -> None:
        core.end(error=error)


def _running(running: _State, killing: _State, ended: _State) -> None:
    """Its output goes to the streams until it ends (killed or not), or its guest or sandbox is gone."""
    for state in (running, killing):
        state.upon(ProcessLife.started).loop().returns(None)

        @state.upon(ProcessLife.output).loop()
        def output(life: ProcessLife, core: ProcessCore, name: str, data: bytes) -> None:
            core.send(data_event(name, data))

        @state.upon(ProcessLife.exited).to(ended)
        def exited(life: ProcessLife, core: ProcessCore, exit_code: int, signal: Optional[str]) -> None:
            core.send(end_event(exit_code, signal))
            core.end()

    @running.upon(ProcessLife.failed).to(ended)
    def failed_running(life: ProcessLife, core: ProcessCore, message: str) -> None:
        core.send(end_event(127, None, message[:1000]))
        core.end()

    @running.upon(ProcessLife.lost).to(ended)
    def lost(life: ProcessLife, core: ProcessCore, error: Exception) -> None:
        core.end(abort=True)

    @running.upon(ProcessLife.kill).to(killing)
    def kill(life: ProcessLife, core: ProcessCore, signal: str) -> None:
        core.signal = signal
        core.kill()


def _killing(killing: _State, ended: _State) -> None:
    """The guest ends it: the loss of its stream is its end by the signal."""
    killing.upon(ProcessLife.kill).loop().returns(None)

    for input in (ProcessLife.lost, ProcessLife.failed):
        @killing.upon(input).to(ended)
        def killed(life: ProcessLife, core: ProcessCore, reason: object) -> None:
            core.send(end_event(-1, core.signal))
            core.end()


PROCESS_LIFE = _build()


def process_life(core: ProcessCore) -> ProcessLife:
    """A new process's machine, starting."""
    return PROCESS_LIFE(core)


__all__ = ["KEEPALIVE_SECONDS", "PROCESS_LIFE", "ProcessControls", "ProcessCore", "ProcessLife", "process_life"]
