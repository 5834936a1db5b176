# -*- test-case-name: tests.nodes.test_phase -*-
"""
A node's phase: what the daemon is doing with it right now, as one automat
machine (diagram: ``docs/state-machines/node-phase.dot``).

Theory of operation
-------------------

The *status* of a node (``Running``, ``Paused``, ``Suspending`` ...) is
persisted in its record and says what its VM is; :mod:`.transitions` decides
from it which operation may go ahead.  The *phase* is not persisted: it says
what this daemon process is doing with the node, and so who may act on it.

- **Starting**: the node is being created, or the start-up recovery has not
  reached it yet.  Lifecycle operations wait until it has :meth:`started
  <NodePhase.started>` (the runtime tells them, once the machine has moved
  on: :meth:`vmservice.nodes.runtime.NodeRuntime.settled`) instead of
  answering busy.
- **Up**: nothing is being done to it; one operation may :meth:`begin
  <NodePhase.begin>`.
- **Busy** (with the name of an operation): one operation runs (a delete is
  one too, until the node is abandoned).  Another one is refused with 409
  ``busy``; :meth:`finish <NodePhase.finish>` goes back to Up.  While a
  *restore* runs, the end of its VM is the restore's business (it keeps the
  node Suspended).
- **Removing**: the node was :meth:`abandoned <NodePhase.abandon>`: it is
  being deleted or forgotten, or the daemon stops: whatever its VM does now
  is expected, not news, and its record is no longer written.  Nothing leaves
  this phase.

Inputs never ask which phase the node is in; each phase answers each input
in its own way (:meth:`~NodePhase.persists`, :meth:`~NodePhase.vm_end_is_news`).
"""

from __future__ import annotations

from typing import Protocol

from attrs import define
from automat import TypeMachine, TypeMachineBuilder

from ..errors import Conflict

#: Operations whose VM's end is their own business while they run.
_OWN_VM_END = frozenset({"restore"})


class NodePhase(Protocol):
    """The inputs of a node's phase."""

    def started(self) -> None:
        """The node's creation or its start-up recovery is done."""

    def begin(self, operation: str) -> None:
        """
        A lifecycle operation starts.

        :raise Conflict: (``busy``) another operation runs, the node has not
            started or it is being removed.
        """

    def finish(self) -> None:
        """The operation that began is over."""

    def abandon(self) -> None:
        """The daemon stops or lets go of the node: nothing of it is news any more."""

    def persists(self) -> bool:
        """Whether changes of the node's record are written to its file."""

    def vm_end_is_news(self) -> bool:
        """Whether its VM ending now means the node stopped (or goes)."""


@define
class PhaseCore:
    """
    What every phase shares.

    :ivar hostname: the node's, for messages.
    """

    hostname: str

    def busy(self, doing: str) -> Conflict:
        """The 409 for a node that is doing something else."""
        return Conflict(f"node {self.hostname!r} is busy ({doing})", code="busy")


def _build() -> TypeMachine[NodePhase, PhaseCore]:
    builder = TypeMachineBuilder(NodePhase, PhaseCore)
    starting = builder.state("Starting")
    up = builder.state("Up")
    busy = builder.state("Busy", lambda phase, core, operation: operation)
    removing = builder.state("Removing")

    starting.upon(NodePhase.started).to(up).returns(None)
    for state in (up, removing):
        state.upon(NodePhase.started).loop().returns(None)
    busy.upon(NodePhase.started, nodata=True).loop().returns(None)

    @starting.upon(NodePhase.begin).loop()
    def begin_too_early(phase: NodePhase, core: PhaseCore, operation: str) -> None:
        raise core.busy("starting")

    up.upon(NodePhase.begin).to(busy).returns(None)

    @busy.upon(NodePhase.begin).loop()
    def busy_begin(phase: NodePhase, core: PhaseCore, doing: str, operation: str) -> None:
        raise core.busy(doing)

    @removing.upon(NodePhase.begin).loop()
    def removing_begin(phase: NodePhase, core: PhaseCore, operation: str) -> None:
        raise core.busy("being removed")

    busy.upon(NodePhase.finish).to(up).returns(None)
    for state in (starting, up, removing):
        state.upon(NodePhase.finish).loop().returns(None)
    for state in (starting, up, removing):
        state.upon(NodePhase.abandon).to(removing).returns(None)
    busy.upon(NodePhase.abandon).to(removing).returns(None)

    for state in (starting, up):
        state.upon(NodePhase.persists).loop().returns(True)
        state.upon(NodePhase.vm_end_is_news).loop().returns(True)
    busy.upon(NodePhase.persists).loop().returns(True)
    removing.upon(NodePhase.persists).loop().returns(False)
    removing.upon(NodePhase.vm_end_is_news).loop().returns(False)

    @busy.upon(NodePhase.vm_end_is_news).loop()
    def busy_news(phase: NodePhase, core: PhaseCore, doing: str) -> bool:
        return doing not in _OWN_VM_END

    return builder.build()


#: The machine; calling it with a core gives a node's phase.
NODE_PHASE = _build()


def node_phase(hostname: str) -> NodePhase:
    """A new node's phase: Starting."""
    return NODE_PHASE(PhaseCore(hostname))


__all__ = ["NODE_PHASE", "NodePhase", "PhaseCore", "node_phase"]
