# -*- test-case-name: tests.agent.test_inbound -*-
"""
What the guest sent on one stream and the stream's protocol has not taken yet.

A stream is an ``IPushProducer`` for its protocol's consumer: while it is paused,
what arrives waits here, and no credit is given back for it, so the guest stops
after one window.  The guest's HALF_CLOSE waits here too, behind the data sent
before it.  This is delivery, not the stream's lifecycle: the lifecycle
(:mod:`vmservice.agent.lifecycle`) hears of the guest's HALF_CLOSE only once the
protocol had everything before it.
"""

from __future__ import annotations

import collections
from typing import Callable, Deque, Optional


class Inbox:
    """
    Data and the HALF_CLOSE of one stream, in order, handed over while not paused.

    :param deliver: hands bytes to the protocol (and gives the guest its credit
        back).
    :param end: the protocol had every byte before the guest's HALF_CLOSE.
    :ivar paused: whether the protocol's consumer paused delivery.
    """

    def __init__(self, deliver: Callable[[bytes], None], end: Callable[[], None]) -> None:
        self._deliver = deliver
        self._end = end
        self.paused = False
        #: What waits, in order; ``None`` is the guest's HALF_CLOSE.
        self._waiting: Deque[Optional[bytes]] = collections.deque()

    def received(self, data: bytes) -> None:
        """
        The guest sent ``data``: deliver it now, or once resumed.
        """
        if self.paused or self._waiting:
            self._waiting.append(data)
        else:
            self._deliver(data)

    def half_closed(self) -> None:
        """
        The guest half-closed: pass that on after the data before it.
        """
        if self.paused or self._waiting:
            self._waiting.append(None)
        else:
            self._end()

    def pause(self) -> None:
        """
        Hold everything back.
        """
        self.paused = True

    def resume(self) -> None:
        """
        Deliver what waits, until done or paused again.
        """
        if not self.paused:
            return
        self.paused = False
        while self._waiting and not self.paused:
            item = self._waiting.popleft()
            if item is None:
                self._end()
            else:
                self._deliver(item)

    def clear(self) -> None:
        """
        Drop what waits: the stream ended.
        """
        self._waiting.clear()
