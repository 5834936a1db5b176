# -*- test-case-name: tests.e2b.test_watching -*-
"""
The life of a polling watcher (``CreateWatcher``, :mod:`.watching`) as one
automat machine (diagram: ``docs/state-machines/e2b-watcher.dot``).

- **Watching**: the guest watches the directory; each event it reports is
  shown as envd would (:mod:`.watch_events`) and held (at most :data:`MAX_EVENTS`; later ones are dropped, and counted,
  until the held ones are taken); ``take`` hands them over.
- **Ended**: the guest's watch ended (the directory went, the agent was
  lost): later events cannot come; ``take`` hands over what is held, and
  once nothing is, answers the end's error (the watcher is then forgotten).
- **Removed**: ``RemoveWatcher`` (or its sandbox went): the guest's watch is
  cancelled if it still ran; nothing more is heard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.logger import Logger

from ..errors import AgentError
from ..guestport.watch import IWatch, WatchEvent
from .connect import Code, ConnectError
from .envd_failures import connect_error_of
from .watch_events import EventFolding, event_message

log = Logger(namespace="vmservice.e2b")

#: Events a polling watcher holds until they are taken.
MAX_EVENTS = 10_000


class WatcherInputs(Protocol):
    """What can happen to a polling watcher."""

    def heard(self, event: WatchEvent) -> None:
        """The guest reported ``event``."""

    def ended(self, error: AgentError | None) -> None:
        """The guest's watch ended (``None``: nothing it watched is left)."""

    def take(self) -> list[dict[str, Any]]:
        """The events held, handed over (``GetWatcherEvents``)."""

    def remove(self) -> None:
        """The watcher goes (``RemoveWatcher``, or its sandbox went)."""


@dataclass
class WatcherCore:
    """
    What a watcher's states share.

    :ivar sandbox_id: its sandbox.
    :ivar root: the watched directory (events are named relative to it).
    :ivar watch: the guest's watch.
    :ivar events: the events held.
    :ivar dropped: events dropped since the last take.
    :ivar error: the end's error, once ended.
    :ivar folding: the events as envd would show them (an upload's temporary file folded).
    """

    sandbox_id: str
    root: str
    watch: IWatch | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0
    error: AgentError | None = None
    folding: EventFolding = field(default_factory=EventFolding)


def _hold(inputs: WatcherInputs, core: WatcherCore, event: WatchEvent) -> None:
    shown = core.folding.fold(event)
    sent = event_message(shown, core.root) if shown is not None else None
    if sent is None:
        return
    if len(core.events) >= MAX_EVENTS:
        core.dropped += 1
        return
    core.events.append(sent)


def _hand_over(inputs: WatcherInputs, core: WatcherCore) -> list[dict[str, Any]]:
    taken, core.events = core.events, []
    if core.dropped:
        log.warn("a watcher of {sandbox} dropped {count} events", sandbox=core.sandbox_id, count=core.dropped)
        core.dropped = 0
    return taken


def _hand_over_or_fail(inputs: WatcherInputs, core: WatcherCore) -> list[dict[str, Any]]:
    taken = _hand_over(inputs, core)
    if taken:
        return taken
    if core.error is not None:
        raise connect_error_of(core.error)
    raise ConnectError(Code.NOT_FOUND, "the watched directory is gone")


def _record_end(inputs: WatcherInputs, core: WatcherCore, error: AgentError | None) -> None:
    core.error = error


def _cancel(inputs: WatcherInputs, core: WatcherCore) -> None:
    if core.watch is not None:
        core.watch.cancel()


def _build() -> TypeMachine[WatcherInputs, WatcherCore]:
    """The machine: its states, what each input does in them, and what each state ignores."""
    builder = TypeMachineBuilder(WatcherInputs, WatcherCore)
    watching, ended, removed = builder.state("Watching"), builder.state("Ended"), builder.state("Removed")

    watching.upon(WatcherInputs.heard).loop()(_hold)
    watching.upon(WatcherInputs.take).loop()(_hand_over)
    watching.upon(WatcherInputs.ended).to(ended)(_record_end)
    watching.upon(WatcherInputs.remove).to(removed)(_cancel)

    ended.upon(WatcherInputs.take).loop()(_hand_over_or_fail)
    ended.upon(WatcherInputs.remove).to(removed).returns(None)
    for state in (ended, removed):
        state.upon(WatcherInputs.heard).loop().returns(None)
        state.upon(WatcherInputs.ended).loop().returns(None)
    removed.upon(WatcherInputs.remove).loop().returns(None)
    removed.upon(WatcherInputs.take).loop().returns([])
    return builder.build()


#: The machine; calling it with a core gives one watcher's inputs.
WATCHER_MACHINE = _build()

__all__ = ["MAX_EVENTS", "WATCHER_MACHINE", "WatcherCore", "WatcherInputs"]
