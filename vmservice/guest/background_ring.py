# -*- test-case-name: tests.guest.test_background,tests.integration.guest.test_background -*-
"""
A background exec's log: a :class:`Ring` of numbered frames holding at most
its capacity of output, the oldest evicted first (readers that ask for an
evicted frame are told how much they missed).
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from vmservice.wire.logframes import LogFrame, exit_frame


class Ring:
    """
    An exec's log: frames numbered from 1, at most ``capacity`` bytes of output
    kept, the oldest evicted first.

    :ivar written: output bytes ever appended.
    :ivar dropped_bytes: output bytes evicted.
    :ivar dropped_frames: frames evicted.
    :ivar next_id: the id the next frame gets.
    """

    def __init__(self, capacity: int, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.capacity = capacity
        self._clock_ns = clock_ns
        # id -> (frame, offset of its first byte in the whole output); insertion order is id order.
        self._frames: dict[int, tuple[LogFrame, int]] = {}
        self._size = 0
        self.written = 0
        self.dropped_bytes = 0
        self.dropped_frames = 0
        self.next_id = 1

    @property
    def first_id(self) -> int:
        """The oldest frame still held (``next_id`` when none is)."""
        return self.next_id - len(self._frames)

    @property
    def first_offset(self) -> int:
        """Output bytes before the oldest frame still held."""
        return self.dropped_bytes

    def append_output(self, kind: int, data: bytes) -> LogFrame:
        """
        Keep ``data`` (at most ``capacity`` bytes: a longer one keeps its end)
        written on ``kind`` (:data:`STDOUT` or :data:`STDERR`).
        """
        if len(data) > self.capacity:
            self.written += len(data) - self.capacity
            self.dropped_bytes += len(data) - self.capacity
            data = data[-self.capacity:]
        while self._frames and self._size + len(data) > self.capacity:
            oldest = next(iter(self._frames))
            frame, _ = self._frames.pop(oldest)
            self._size -= len(frame.payload)
            self.dropped_bytes += len(frame.payload)
            self.dropped_frames += 1
        frame = LogFrame(kind, self.next_id, self._clock_ns(), bytes(data))
        self._frames[frame.id] = (frame, self.written)
        self.next_id += 1
        self._size += len(data)
        self.written += len(data)
        return frame

    def append_exit(self, exit_code: int, signal_name: Optional[str]) -> LogFrame:
        """The last frame: how the process ended (takes no room)."""
        frame = exit_frame(self.next_id, self._clock_ns(), exit_code, signal_name)
        self._frames[frame.id] = (frame, self.written)
        self.next_id += 1
        return frame

    def get(self, frame_id: int) -> tuple[LogFrame, int]:
        """Frame ``frame_id`` and its offset; ``KeyError`` unless ``first_id <= frame_id < next_id``."""
        return self._frames[frame_id]


__all__ = ["Ring"]
