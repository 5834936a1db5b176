# -*- test-case-name: tests.guest.test_agent -*-
"""
``{"op": "echo"}``: every byte sent back, the raw channel's throughput with
flow control.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping

from vmservice.guest.streams import GuestStream, StreamHandler


class EchoHandler(StreamHandler):
    """
    ``{"op": "echo"}``: sends every byte back, and HALF_CLOSE after the host's.

    Credit is given back only once the echo went out, so a host that does not read
    its replies stops itself: the raw channel's throughput with flow control.
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._acknowledged = 0

    def data_received(self, data: bytes) -> None:
        self.stream.write(data)

    def flushed(self) -> None:
        sent = self.stream.sent_total
        if sent > self._acknowledged:
            count, self._acknowledged = sent - self._acknowledged, sent
            self.stream.consumed(count)

    def half_closed(self) -> None:
        self.stream.end()


__all__ = ["EchoHandler"]
