# -*- test-case-name: tests.e2b.test_life -*-
"""
A sandbox's life as an automat machine (diagram:
``docs/state-machines/e2b-sandbox.dot``): what a pause, a resume (E2B's
connect) and a kill may do in each state, and when its timeout runs.

- **Creating**: its node is being made; **Running** once made (its timer
  armed at its ``endAt``), **Gone** when that failed.  A sandbox read back
  at the daemon's start begins here too: Running or **Paused** as its node
  is found.
- **Running**: the timer runs.  At ``endAt`` it asks for a kill, or a pause
  when the sandbox was made with ``autoPause``; a client may ask for either.
- **Pausing**: the node is being suspended; **Paused** once suspended,
  Running again when that failed.
- **Paused**: no timer (a paused sandbox lasts until it is killed or
  resumed).  A connect resumes it: **Resuming**, then Running (the timer
  armed again) or, when the restore failed, Paused.
- **Ending**: its node is being deleted; **Gone** once deleted.  A failed
  delete leaves it Running, its timer asking again a little later.
- **Gone**: nothing more; the record is forgotten.

Every request input answers a :class:`Verdict`: go ahead, nothing to do
(already paused, already running), busy (another operation is under way)
or gone.  The machine decides; :class:`~.sandboxes.Sandboxes` acts.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable, Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder

from ..errors import Conflict, NotFound


class Verdict(Enum):
    """What a request may do in the sandbox's state."""

    GO = "go"
    ALREADY = "already"
    BUSY = "busy"
    GONE = "gone"


class LifeInputs(Protocol):
    """What happens to a sandbox: requests (answering a verdict) and the outcomes of what they started."""

    def created(self) -> None:
        """Its node was made."""

    def found_paused(self) -> None:
        """Its node was found suspended (at the daemon's start)."""

    def pause(self) -> Verdict:
        """A pause is asked for (by a client, or by the timer of an ``autoPause`` sandbox)."""

    def paused(self) -> None:
        """Its node is suspended."""

    def pause_failed(self) -> None:
        """Its node could not be suspended (it runs on)."""

    def resume(self) -> Verdict:
        """A connect asks for it running."""

    def resumed(self) -> None:
        """Its node runs again."""

    def resume_failed(self) -> None:
        """Its node could not be restored (it stays suspended)."""

    def kill(self) -> Verdict:
        """A kill is asked for (by a client, or by the timer)."""

    def kill_failed(self) -> None:
        """Its node could not be deleted."""

    def gone(self) -> None:
        """Its node is gone (deleted, its create failed, removed through the Slicer API)."""


@define
class LifeCore:
    """
    What the machine acts on: the sandbox's timer.

    :ivar arm: start (again) the timer at the sandbox's ``endAt``.
    :ivar disarm: stop it.
    :ivar retry: start it to fire a little later (after a failed kill).
    """

    arm: Callable[[], None]
    disarm: Callable[[], None]
    retry: Callable[[], None]


def _build() -> TypeMachine[LifeInputs, LifeCore]:
    builder = TypeMachineBuilder(LifeInputs, LifeCore)
    creating, running, pausing, paused = (builder.state("Creating"), builder.state("Running"),
                                          builder.state("Pausing"), builder.state("Paused"))
    resuming, ending, gone = builder.state("Resuming"), builder.state("Ending"), builder.state("Gone")

    @creating.upon(LifeInputs.created).to(running)
    @pausing.upon(LifeInputs.pause_failed).to(running)
    @resuming.upon(LifeInputs.resumed).to(running)
    def start_timer(inputs: LifeInputs, core: LifeCore) -> None:
        core.arm()

    @running.upon(LifeInputs.pause).to(pausing)
    @running.upon(LifeInputs.kill).to(ending)
    def stop_timer(inputs: LifeInputs, core: LifeCore) -> Verdict:
        core.disarm()
        return Verdict.GO

    @running.upon(LifeInputs.gone).to(gone)
    def timer_gone(inputs: LifeInputs, core: LifeCore) -> None:
        core.disarm()

    @ending.upon(LifeInputs.kill_failed).to(running)
    def try_again(inputs: LifeInputs, core: LifeCore) -> None:
        core.retry()

    running.upon(LifeInputs.resume).loop().returns(Verdict.ALREADY)
    creating.upon(LifeInputs.found_paused).to(paused).returns(None)
    pausing.upon(LifeInputs.paused).to(paused).returns(None)
    paused.upon(LifeInputs.pause).loop().returns(Verdict.ALREADY)
    paused.upon(LifeInputs.resume).to(resuming).returns(Verdict.GO)
    resuming.upon(LifeInputs.resume_failed).to(paused).returns(None)
    for state in (pausing, resuming):
        state.upon(LifeInputs.pause).loop().returns(Verdict.BUSY)
        state.upon(LifeInputs.resume).loop().returns(Verdict.BUSY)
    for state in (pausing, paused, resuming):
        state.upon(LifeInputs.kill).to(ending).returns(Verdict.GO)
    for state in (creating, pausing, paused, resuming, ending):
        state.upon(LifeInputs.gone).to(gone).returns(None)
    for state in (ending, gone):
        for request in (LifeInputs.pause, LifeInputs.resume, LifeInputs.kill):
            state.upon(request).loop().returns(Verdict.GONE)
        for outcome in (LifeInputs.paused, LifeInputs.pause_failed, LifeInputs.resumed, LifeInputs.resume_failed):
            state.upon(outcome).loop().returns(None)
    gone.upon(LifeInputs.gone).loop().returns(None)
    gone.upon(LifeInputs.kill_failed).loop().returns(None)
    return builder.build()


def go_ahead(verdict: Verdict, sandbox_id: str, already: str | None = None) -> None:
    """
    Return when ``verdict`` lets a request go ahead (GO, or ALREADY unless
    ``already`` names the conflict's code); else raise what it means:
    :class:`~vmservice.errors.NotFound` (GONE), :class:`~vmservice.errors.Conflict` (BUSY, ALREADY).
    """
    if verdict is Verdict.GONE:
        raise NotFound(f"sandbox {sandbox_id!r} not found", code="sandbox_not_found")
    if verdict is Verdict.BUSY:
        raise Conflict(f"sandbox {sandbox_id!r} is being paused or resumed", code="busy")
    if verdict is Verdict.ALREADY and already is not None:
        raise Conflict(f"sandbox {sandbox_id!r} is already paused", code=already)


#: The machine; calling it with a :class:`LifeCore` gives one sandbox's life, Creating.
SANDBOX_LIFE = _build()


__all__ = ["LifeCore", "LifeInputs", "SANDBOX_LIFE", "Verdict", "go_ahead"]
