"""
Tests for :mod:`vmservice.buffer_budget`: reservations that grow, are refused
past the budget without taking anything, settle, and are given back once.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice.buffer_budget import DEFAULT_MAX, DEFAULT_MIN, DEFAULT_UNKNOWN, BufferBudget, default_size
from vmservice.errors import BufferBudgetExhausted, http_error

GiB = 1024**3


class ReservationTests(SynchronousTestCase):
    def test_grow_and_release(self) -> None:
        """Reservations add up in the budget as they grow; releasing one gives all of it back."""
        budget = BufferBudget(100)
        first, second = budget.reservation("a"), budget.reservation("b")
        first.grow(30)
        second.grow(20)
        first.grow(10)
        self.assertEqual((budget.held, first.held, second.held), (60, 40, 20))
        first.release()
        self.assertEqual((budget.held, first.held), (20, 0))
        second.release()
        self.assertEqual(budget.held, 0)

    def test_refused_past_the_budget(self) -> None:
        """
        Growing past the budget raises BufferBudgetExhausted (503
        buffer_budget_exhausted, naming the key and what needed the room) and
        takes nothing; the budget can be filled exactly.
        """
        budget = BufferBudget(100)
        holder, other = budget.reservation("a"), budget.reservation("the guest's reply to 'fs'")
        holder.grow(60)
        with self.assertRaises(BufferBudgetExhausted) as raised:
            other.grow(41)
        self.assertEqual((budget.held, other.held, budget.refusals), (60, 0, 1))
        status, body = http_error(raised.exception)
        self.assertEqual((status, body["code"]), (503, "buffer_budget_exhausted"))
        self.assertIn("limits.buffer_budget", body["error"])
        self.assertIn("the guest's reply to 'fs'", body["error"])
        other.grow(40)
        self.assertEqual(budget.held, 100)

    def test_release_once(self) -> None:
        """Only the first release gives anything back; growing a released reservation is a bug."""
        budget = BufferBudget(100)
        kept, released = budget.reservation("a"), budget.reservation("b")
        kept.grow(10)
        released.grow(10)
        released.release()
        released.release()
        self.assertEqual(budget.held, 10)
        self.assertRaises(RuntimeError, released.grow, 1)

    def test_settle(self) -> None:
        """Settling holds exactly the given size, past the budget if need be; release gives it back."""
        budget = BufferBudget(100)
        reservation = budget.reservation("a")
        reservation.grow(90)
        reservation.settle(104)
        self.assertEqual((budget.held, reservation.held), (104, 104))
        reservation.settle(50)
        self.assertEqual(budget.held, 50)
        reservation.release()
        reservation.settle(7)
        self.assertEqual(budget.held, 0)

    def test_no_bound(self) -> None:
        """A budget of size None counts but never refuses."""
        budget = BufferBudget(None)
        budget.reservation("a").grow(10 * GiB)
        self.assertEqual((budget.held, budget.refusals), (10 * GiB, 0))


class DefaultSizeTests(SynchronousTestCase):
    def test_default_size(self) -> None:
        """A 32nd of the RAM, between 64 MiB and 1 GiB; 256 MiB when the RAM is unknown."""
        self.assertEqual(default_size(24 * GiB), 768 * 1024**2)
        self.assertEqual(default_size(1 * GiB), DEFAULT_MIN)
        self.assertEqual(default_size(256 * GiB), DEFAULT_MAX)
        self.assertEqual(default_size(None), DEFAULT_UNKNOWN)
