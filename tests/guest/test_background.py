# -*- test-case-name: tests.guest.test_background -*-
"""
Tests for the pure parts of :mod:`vmservice.guest.background`: the ring.  The
handler with real processes is in :mod:`tests.integration.guest.test_background`.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest.background_ring import Ring
from vmservice.wire.logframes import EXIT, STDERR, STDOUT


class RingTests(SynchronousTestCase):
    @given(st.integers(1, 200), st.lists(st.tuples(st.sampled_from([STDOUT, STDERR]), st.binary(min_size=1, max_size=80))))
    def test_invariants(self, capacity: int, writes: list[tuple[int, bytes]]) -> None:
        """
        Ids are consecutive from 1; at most ``capacity`` bytes are held; what is
        held is the end of what was written, in order; written = held + dropped.
        """
        ring = Ring(capacity, lambda: 7)
        for kind, data in writes:
            ring.append_output(kind, data)
        self.assertEqual(ring.next_id, len(writes) + 1)
        held = [ring.get(i)[0] for i in range(ring.first_id, ring.next_id)]
        self.assertEqual([f.id for f in held], list(range(ring.first_id, ring.next_id)))
        total = b"".join(data for _, data in writes)
        kept = b"".join(f.payload for f in held)
        self.assertLessEqual(len(kept), capacity)
        self.assertTrue(total.endswith(kept))
        self.assertEqual((ring.written, ring.dropped_bytes + len(kept)), (len(total), len(total)))
        self.assertEqual(ring.dropped_frames + len(held), len(writes))
        if held:
            self.assertEqual(ring.get(ring.first_id)[1], ring.first_offset)

    def test_eviction(self) -> None:
        """The oldest frames go first; offsets count every byte ever written."""
        ring = Ring(10)
        for chunk in (b"aaaa", b"bbbb", b"cccc"):
            ring.append_output(STDOUT, chunk)
        self.assertEqual((ring.first_id, ring.dropped_frames, ring.dropped_bytes), (2, 1, 4))
        self.assertEqual(ring.get(3)[1], 8)
        self.assertRaises(KeyError, ring.get, 1)

    def test_longer_than_capacity(self) -> None:
        """One write longer than the ring keeps its end."""
        ring = Ring(4)
        frame = ring.append_output(STDERR, b"0123456789")
        self.assertEqual((frame.payload, ring.written, ring.dropped_bytes), (b"6789", 10, 6))

    def test_exit_takes_no_room(self) -> None:
        ring = Ring(4)
        ring.append_output(STDOUT, b"abcd")
        frame = ring.append_exit(1, None)
        self.assertEqual((frame.kind, frame.id, ring.first_id, ring.next_id), (EXIT, 2, 1, 3))
        self.assertEqual(frame.control(), {"exit_code": 1, "signal": None})


class PhaseDiagramTests(SynchronousTestCase):
    def test_diagram_is_the_table(self) -> None:
        """docs/state-machines/background-exec.dot draws exactly the transitions of the table."""
        from tests.diagrams import drawn_transitions
        from vmservice.guest.background import TRANSITIONS

        table = {(phase, event, new) for (phase, event), new in TRANSITIONS.items()}
        self.assertEqual(drawn_transitions("background-exec.dot"), table)
