# -*- test-case-name: tests.nodes.test_idle -*-
"""
Idle suspend and wake on request: a node of a group with ``idle_suspend``
is suspended to disk after that long without API activity, and restored by
the next request that needs its guest, which then proceeds as if the node
had never slept (only slower).

Theory of operation
-------------------

Each node has an :class:`IdleNode`, one automat machine (diagram:
``docs/state-machines/idle.dot``) with four states (and **Gone**, once the
node is forgotten) and a count of *holds*
(requests on the node being served, streams included: an exec, a copy, a
shell, a tunnel, a watch, followed logs) kept in its :class:`IdleCore`:

- **Awake**: the idle timer runs while no hold is open; every hold stops
  it, the last release starts it again, and so does every request that
  reaches the guest (:meth:`~IdleNode.active`).  When it expires the
  automatic suspend starts: **Suspending**.
- **Suspending**: :meth:`.snapshots.Snapshots.suspend` with
  ``automatic=True``: only a ``Running`` node that no other operation holds
  is suspended, and its record says so (``idle_suspended``).  A request
  that needs the guest meanwhile waits (:meth:`~IdleNode.active` or
  :meth:`~IdleNode.wake`, whatever the record said when it came) until the
  suspend is over, then looks at the record again: the node is **Asleep**
  and the request wakes it, or the suspend did nothing (the node was
  paused, stopped, busy) or failed, the node is Awake, and the request goes
  on (the node's status decides what it gets).
- **Asleep**: no timer.  The first request that needs the guest starts
  the wake: **Waking**.
- **Waking**: :meth:`.snapshots.Snapshots.wake`: the restore path, then
  the agent's first answer.  Every request that arrives meanwhile waits for
  the same wake (many requests, one wake).  Success: Awake (timer started
  once no hold is open); failure: Asleep again, every waiting request gets
  the failure (e.g. a memory budget's refusal, or 503 when the agent does
  not answer).

Whether a node sleeps is its record's business, not the machine's: the
record's ``idle_suspended`` survives a daemon crash (see ``recovery.py``),
and the wake checks it under the node's phase, so a node the user suspended,
paused, restored or relaunched is never woken by a request.  The machine's
state only says what to do with the next request;
:class:`~.idling.IdleNodes` asks for a wake exactly when the record says the
node sleeps.  Requests waiting for a suspend or a wake are let go in the
next turn of the reactor, never from inside a transition.

Nothing here imports the global reactor or knows HTTP.
"""

from __future__ import annotations

from typing import Callable, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from automat import TypeMachine, TypeMachineBuilder
from automat._typed import TypedState  # the type of a builder's states, not exported

log = Logger()


class IdleNode(Protocol):
    """The inputs of a node's idle machine."""

    def hold(self) -> None:
        """A request on the node (or a stream of it) began: the timer stops."""

    def release(self) -> None:
        """A request on the node ended: the timer starts again once none is open."""

    def active(self) -> "Deferred[None]":
        """
        A request needs the guest of a node whose record says it is awake:
        its timer starts over (from Asleep: someone else woke it).  Fires at
        once, or, while a suspend or a wake runs, once it is over (then look
        at the record again: the node may sleep now).
        """

    def expired(self) -> None:
        """The idle timer ran out."""

    def found_asleep(self) -> None:
        """The node's record says the timer suspended it (found so at start)."""

    def wake(self) -> "Deferred[None]":
        """
        A request needs the guest of a node whose record says the timer
        suspended it: fires once it is awake (or fails as the wake did); while
        the automatic suspend runs, once that is over (look at the record again).
        """

    def slept(self) -> None:
        """The automatic suspend took the snapshot: the node sleeps."""

    def stayed(self) -> None:
        """The automatic suspend did nothing (or failed): the node is as it was."""

    def woke(self) -> None:
        """The wake is over: the node runs and its agent answers (or it needed no wake)."""

    def wake_failed(self, failure: Failure) -> None:
        """The wake failed: the node still sleeps."""

    def forget(self) -> None:
        """The node is gone, or the daemon stops: no more timer."""


@define
class IdleCore:
    """
    What every state of a node's idle machine shares.

    :ivar hostname: the node's.
    :ivar clock: runs the timer.
    :ivar timeout: seconds without activity before the automatic suspend;
        ``None``: never (a node asleep from an earlier configuration is
        still woken).
    :ivar suspend: starts the automatic suspend; fires with whether the
        node now sleeps.
    :ivar wake: starts the wake; fires once the node is awake.
    :ivar holds: requests on the node being served.
    :ivar timer: the idle timer while it runs.
    :ivar waiters: requests waiting for the node to be awake.
    :ivar machine: the machine this is the core of (its outcomes go back to it).
    """

    hostname: str
    clock: IReactorTime
    timeout: float | None
    suspend: Callable[[], "Deferred[bool]"]
    wake: Callable[[], "Deferred[None]"]
    holds: int = 0
    timer: IDelayedCall | None = None
    waiters: list["Deferred[None]"] = field(factory=list)
    machine: IdleNode | None = None

    def arm(self) -> None:
        """Start the timer over, if the node has a timeout and no hold is open."""
        self.disarm()
        if self.timeout is not None and self.holds == 0:
            self.timer = self.clock.callLater(self.timeout, self._expired)

    def disarm(self) -> None:
        """Stop the timer."""
        timer, self.timer = self.timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _expired(self) -> None:
        self.timer = None
        assert self.machine is not None
        self.machine.expired()

    def waiter(self) -> "Deferred[None]":
        """A new waiting request's Deferred."""
        waiting: Deferred[None] = Deferred()
        self.waiters.append(waiting)
        return waiting

    def settle(self, failure: Failure | None = None) -> None:
        """
        Let every waiting request go on, or fail each with ``failure``: in
        the next turn of the reactor, outside the machine (a request that
        goes on may ask it again at once).
        """
        waiters, self.waiters = self.waiters, []
        if waiters:
            self.clock.callLater(0, _fire, waiters, failure)


    def start_suspend(self) -> None:
        """Start the automatic suspend; its outcome goes back to the machine."""
        machine = self.machine
        assert machine is not None
        self.suspend().addCallbacks(
            lambda slept: machine.slept() if slept else machine.stayed(), self._suspend_failed
        )

    def _suspend_failed(self, failure: Failure) -> None:
        log.failure("the automatic suspend of node {hostname} failed", failure, hostname=self.hostname)
        assert self.machine is not None
        self.machine.stayed()

    def start_wake(self) -> None:
        """Start the wake; its outcome goes back to the machine."""
        machine = self.machine
        assert machine is not None
        self.wake().addCallbacks(lambda _: machine.woke(), machine.wake_failed)


def _fire(waiters: list["Deferred[None]"], failure: Failure | None) -> None:
    """Fire each waiter that is still waiting."""
    for waiting in waiters:
        if waiting.called:
            continue  # its request went away (cancelled)
        if failure is None:
            waiting.callback(None)
        else:
            waiting.errback(failure)


def _count(delta: int) -> Callable[[IdleNode, IdleCore], None]:
    def count(node: IdleNode, core: IdleCore) -> None:
        core.holds += delta

    return count


#: A state of this machine, as the builder makes it.
_State = TypedState[IdleNode, IdleCore]


def _build() -> TypeMachine[IdleNode, IdleCore]:
    builder = TypeMachineBuilder(IdleNode, IdleCore)
    states = (
        builder.state("Awake"), builder.state("Suspending"), builder.state("Asleep"), builder.state("Waking"),
        builder.state("Gone"),
    )
    _holds(*states)
    _requests(*states)
    _timer(*states)
    _outcomes(*states)
    return builder.build()


def _holds(awake: _State, suspending: _State, asleep: _State, waking: _State, gone: _State) -> None:
    """Requests being served stop the timer of an awake node; elsewhere they are only counted."""

    @awake.upon(IdleNode.hold).loop()
    def awake_hold(node: IdleNode, core: IdleCore) -> None:
        core.holds += 1
        core.disarm()

    @awake.upon(IdleNode.release).loop()
    def awake_release(node: IdleNode, core: IdleCore) -> None:
        core.holds -= 1
        core.arm()

    for state in (suspending, asleep, waking, gone):
        state.upon(IdleNode.hold).loop()(_count(1))
        state.upon(IdleNode.release).loop()(_count(-1))


def _requests(awake: _State, suspending: _State, asleep: _State, waking: _State, gone: _State) -> None:
    """Requests that need the guest: go on, wait, or wake the node."""

    @awake.upon(IdleNode.active).loop()
    def awake_active(node: IdleNode, core: IdleCore) -> Deferred[None]:
        core.arm()
        return succeed(None)

    @asleep.upon(IdleNode.active).to(awake)
    def asleep_active(node: IdleNode, core: IdleCore) -> Deferred[None]:
        core.arm()
        return succeed(None)

    @awake.upon(IdleNode.wake).to(waking)
    def wake_unexpected(node: IdleNode, core: IdleCore) -> Deferred[None]:
        # The record says asleep but this machine did not put it to sleep
        # (the record changed behind it): wake it all the same.
        core.disarm()
        waiting = core.waiter()
        core.start_wake()
        return waiting

    @asleep.upon(IdleNode.wake).to(waking)
    def wake(node: IdleNode, core: IdleCore) -> Deferred[None]:
        waiting = core.waiter()
        core.start_wake()
        return waiting

    for state in (suspending, waking):
        for request in (IdleNode.active, IdleNode.wake):
            @state.upon(request).loop()
            def wait(node: IdleNode, core: IdleCore) -> Deferred[None]:
                return core.waiter()

    for request in (IdleNode.active, IdleNode.wake):
        @gone.upon(request).loop()
        def gone_request(node: IdleNode, core: IdleCore) -> Deferred[None]:
            return succeed(None)  # the request finds out the node is gone


def _timer(awake: _State, suspending: _State, asleep: _State, waking: _State, gone: _State) -> None:
    """The timer's expiry, a node found asleep, a node gone."""

    @awake.upon(IdleNode.expired).to(suspending)
    def expired(node: IdleNode, core: IdleCore) -> None:
        core.start_suspend()

    @awake.upon(IdleNode.found_asleep).to(asleep)
    def found_asleep(node: IdleNode, core: IdleCore) -> None:
        core.disarm()

    for state in (suspending, asleep, waking, gone):
        state.upon(IdleNode.expired).loop().returns(None)
        state.upon(IdleNode.found_asleep).loop().returns(None)

    for state in (awake, suspending, asleep, waking):
        @state.upon(IdleNode.forget).to(gone)
        def forget(node: IdleNode, core: IdleCore) -> None:
            core.disarm()

    gone.upon(IdleNode.forget).loop().returns(None)


def _outcomes(awake: _State, suspending: _State, asleep: _State, waking: _State, gone: _State) -> None:
    """The ends of the automatic suspend and of the wake."""

    @suspending.upon(IdleNode.slept).to(asleep)
    def slept(node: IdleNode, core: IdleCore) -> None:
        core.settle()  # they look again, find it asleep, and wake it

    @suspending.upon(IdleNode.stayed).to(awake)
    def stayed(node: IdleNode, core: IdleCore) -> None:
        core.arm()
        core.settle()

    @waking.upon(IdleNode.woke).to(awake)
    def woke(node: IdleNode, core: IdleCore) -> None:
        core.arm()
        core.settle()

    @waking.upon(IdleNode.wake_failed).to(asleep)
    def wake_failed(node: IdleNode, core: IdleCore, failure: Failure) -> None:
        core.settle(failure)

    for outcome in (IdleNode.slept, IdleNode.stayed, IdleNode.woke):
        @gone.upon(outcome).loop()
        def gone_over(node: IdleNode, core: IdleCore) -> None:
            core.settle()  # its requests find out the node is gone

    @gone.upon(IdleNode.wake_failed).loop()
    def gone_wake_failed(node: IdleNode, core: IdleCore, failure: Failure) -> None:
        core.settle(failure)

    for state in (awake, asleep, waking):
        state.upon(IdleNode.slept).loop().returns(None)
        state.upon(IdleNode.stayed).loop().returns(None)
    for state in (awake, suspending, asleep):
        state.upon(IdleNode.woke).loop().returns(None)
        state.upon(IdleNode.wake_failed).loop().returns(None)


#: The machine; calling it with a core gives a node's idle machine.
IDLE_NODE = _build()


def idle_node(core: IdleCore, asleep: bool = False) -> IdleNode:
    """
    A node's idle machine: Awake with its timer started, or Asleep (a node
    found suspended by the timer at start).
    """
    node = IDLE_NODE(core)
    core.machine = node
    if asleep:
        node.found_asleep()
    else:
        core.arm()
    return node


__all__ = ["IDLE_NODE", "IdleCore", "IdleNode", "idle_node"]
