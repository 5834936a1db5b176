# -*- test-case-name: tests.nodes.warm.test_fork_memory,tests.nodes.warm.test_forking -*-
"""
The memory of one fork (:class:`MemoryFork`): for a parent whose memory is a
file (:mod:`.fork_memory`), the frozen copy its children map, made sparse
and off the reactor, named in the parent's record while the fork runs and
in each child's while its VM maps it; for any other parent, nothing but the
whole state saved and loaded.  :mod:`.forking` drives it.
"""

from __future__ import annotations

import os
import secrets
from typing import Iterable

from attrs import evolve, frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ...hypervisors.base import IMachine, RamBacking
from .fork_memory import COPY_PREFIX, ensure_room, used_bytes
from ..model import NodeRecord
from ..blocking import Blocking
from ..paths import discard
from ..runtime import NodeRuntime
from .sparse_copy import copy_sparse, create_copy, reserve

log = Logger()


@frozen
class MemoryFork:
    """
    The memory of one fork.

    :ivar copy: the frozen copy of the parent's memory file its children
        map, or ``None`` for a parent without one (its whole state is saved
        and every child loads it).
    :ivar clock: for the copy's time in the log.
    :ivar blocking: runs the copy's file work (a tenth of a second and
        more) off the reactor, which serves other requests meanwhile.
    """

    copy: str | None
    clock: IReactorTime
    blocking: Blocking

    @classmethod
    async def begin(cls, parent: NodeRuntime, clock: IReactorTime, blocking: Blocking) -> "MemoryFork":
        """
        Before the parent is paused: once the tmpfs has room for the copy,
        name it in the parent's record (so nothing collects it), make it and
        allocate its pages where the parent's file has data now (off the
        reactor).

        :raise InsufficientMemory: (``tmpfs_full``) the tmpfs has no room
            for it, or filled up meanwhile; nothing is left.
        """
        source = parent.record.memory_file
        if not source:
            return cls(None, clock, blocking)
        directory = os.path.dirname(source)
        ensure_room(directory, used_bytes(source), f"a copy of the memory of node {parent.hostname!r}")
        copy = os.path.join(directory, f"{COPY_PREFIX}{parent.hostname}.{secrets.token_hex(4)}.ram")
        parent.set(parent.record.status, memory_copies=(*parent.record.memory_copies, copy))
        try:
            create_copy(source, copy)  # at once: the next room check counts it
            await blocking(lambda: reserve(source, copy))  # not in the pause
        except BaseException:
            discard(copy)
            parent.set(parent.record.status, memory_copies=tuple(c for c in parent.record.memory_copies if c != copy))
            raise
        return cls(copy, clock, blocking)

    def save(self, machine: IMachine, record: NodeRecord, state: str) -> Deferred[None]:
        """
        The paused parent's state into ``state``: all of it, or its devices
        and the copy of its memory file (off the reactor; the parent stays
        paused until it is done).
        """
        if self.copy is None:
            return machine.save_state(state)
        return Deferred.fromCoroutine(self._save(machine, record.memory_file, state, self.copy))

    async def _save(self, machine: IMachine, source: str, state: str, copy: str) -> None:
        await machine.save_device_state(state)
        began = self.clock.seconds()
        log.info("copying the memory of {source} ({size:.0f} MB in use)", source=os.path.basename(source),
                 size=used_bytes(source) / 1e6)
        copied = await self.blocking(lambda: copy_sparse(source, copy))
        log.info("copied the memory of {source} ({size:.0f} MB) in {ms:.0f} ms",
                 source=os.path.basename(source), size=copied / 1e6, ms=(self.clock.seconds() - began) * 1000)

    def child(self, record: NodeRecord) -> NodeRecord:
        """A child's record: it names the copy (and, its memory block being named, restores like a clone)."""
        if self.copy is None:
            return record
        return evolve(record, memory_copies=(self.copy,), clone_memory=True)

    def memory(self) -> RamBacking | None:
        """A child's memory backend: the copy mapped privately; ``None`` for the plain path."""
        return None if self.copy is None else RamBacking(self.copy, shared=False)

    async def load(self, machine: IMachine, state: str) -> None:
        """Load ``state`` into a child waiting in ``-incoming defer`` and let it run."""
        if self.copy is None:
            await machine.load_state(state)
            await machine.resume()
        else:
            await machine.load_device_state(state, resume=True)

    def end(self, parent: NodeRuntime, named: Iterable[NodeRecord]) -> None:
        """
        The fork is over: the parent's record no longer names the copy, which
        goes unless another of the records ``named`` (its children's) does.
        """
        if self.copy is None:
            return
        parent.set(parent.record.status, memory_copies=tuple(c for c in parent.record.memory_copies if c != self.copy))
        if not any(self.copy in record.memory_copies for record in named if record.hostname != parent.hostname):
            discard(self.copy)


__all__ = ["MemoryFork"]
