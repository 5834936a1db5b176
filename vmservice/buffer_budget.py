# -*- test-case-name: tests.test_buffer_budget -*-
"""
The daemon-wide budget of buffered results: the bytes the daemon holds for
clients in whole results it cannot stream, counted together.

Each such result is capped on its own (a buffered exec keeps at most 16 MiB
of each output; an agent reply has a cap per kind), but nothing capped how
many there are at once.  :class:`BufferBudget` does: every result takes a
:class:`Reservation` that grows as the result does, by what the daemon really
holds of it (a buffered exec's output counts the size it takes in the JSON
answer, so a byte that becomes a six-byte ``\\ufffd`` escape counts six), and
that is released once, when the result was written to its client or failed,
whatever the way (the client gone, a cancel, an error).  A reservation that
would take the budget past its size is refused with
:class:`~vmservice.errors.BufferBudgetExhausted` (503
``buffer_budget_exhausted``) and nothing is added to it: the operation that
needed the room fails, and the others go on.

Who reserves: :mod:`vmservice.api.exec_records` (a buffered exec: its output as
it comes, then its rendered answer until written) and
:mod:`vmservice.agent.client` (one-shot agent replies whose cap is larger than
:data:`FREE_REPLY`).  Streamed responses hold no result: their back-pressure
bounds them, and the connection limits bound how many there are.
"""

from __future__ import annotations

from typing import Optional

from .errors import BufferBudgetExhausted

MiB = 1024 * 1024

#: The default size is a 32nd of the host's RAM, within these bounds; this when the RAM is unknown.
DEFAULT_MIN = 64 * MiB
DEFAULT_MAX = 1024 * MiB
DEFAULT_UNKNOWN = 256 * MiB

#: Agent replies capped at this or less take nothing from the budget: their cap bounds each one, and
#: the daemon asks them itself (health, clock, provisioning: one of each per node at a time) or for a
#: client's request, which the connection limits bound.
FREE_REPLY = 64 * 1024


def default_size(mem_total: Optional[int]) -> int:
    """
    The budget when the configuration gives none: a 32nd of the host's RAM
    (``MemTotal``), at least 64 MiB and at most 1 GiB; 256 MiB when the RAM is
    unknown.  It comes out of the host reserve that admission leaves beside
    the VMs (a tenth of the RAM, at least 1 GiB).
    """
    if mem_total is None:
        return DEFAULT_UNKNOWN
    return max(DEFAULT_MIN, min(DEFAULT_MAX, mem_total // 32))


class BufferBudget:
    """
    The bytes all buffered results may hold at once.

    :param size: the bound in bytes; ``None`` for none (tests, tools).
    :ivar held: the bytes reserved now.
    :ivar refusals: how many reservations were refused so far.
    """

    def __init__(self, size: Optional[int]) -> None:
        self.size = size
        self.held = 0
        self.refusals = 0

    def reservation(self, what: str) -> "Reservation":
        """
        A new, empty reservation for one result.

        :param what: the result, for the refusal's message ("a buffered exec's output").
        """
        return Reservation(self, what)

    def _take(self, what: str, count: int, force: bool = False) -> None:
        if not force and self.size is not None and self.held + count > self.size:
            self.refusals += 1
            raise BufferBudgetExhausted(
                f"the daemon's buffer budget ({self.size} bytes, limits.buffer_budget) has no room for {what} "
                f"({self.held} bytes held by buffered results now, {count} more needed): retry later, or "
                "use a streamed request"
            )
        self.held += count

    def _give(self, count: int) -> None:
        self.held -= count


class Reservation:
    """
    One result's share of a :class:`BufferBudget`: grown as the result
    grows, released once.

    :ivar held: the bytes this result holds now.
    """

    def __init__(self, budget: BufferBudget, what: str) -> None:
        self._budget = budget
        self._what = what
        self.held = 0
        self.released = False

    def grow(self, count: int) -> None:
        """
        Hold ``count`` more bytes.

        :raises BufferBudgetExhausted: the budget has no room for them (the
            reservation is left as it was: release it).
        :raises RuntimeError: the reservation was released (a bug).
        """
        if self.released:
            raise RuntimeError(f"the reservation of {self._what} was released")
        if count > 0:
            self._budget._take(self._what, count)
            self.held += count

    def settle(self, total: int) -> None:
        """
        Hold exactly ``total`` bytes from now on, refusing nothing: the result
        exists already (its rendered answer, within a few hundred bytes of what
        it reserved while it grew) and must now be written.
        """
        if not self.released:
            self._budget._give(self.held)
            self._budget._take(self._what, total, force=True)
            self.held = total

    def release(self) -> None:
        """Give everything back; only the first call does anything."""
        if not self.released:
            self.released = True
            self._budget._give(self.held)
            self.held = 0


__all__ = ["BufferBudget", "DEFAULT_MAX", "DEFAULT_MIN", "DEFAULT_UNKNOWN", "FREE_REPLY", "Reservation", "default_size"]
