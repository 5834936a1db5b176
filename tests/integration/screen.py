"""
What a shell session (:class:`vmservice.client.shell.ShellSession`) printed, read as it arrives, and
command lines typed into it with their output read back: :class:`Screen`.
"""

from __future__ import annotations

import os
import re
import time
from typing import Callable, Optional

from twisted.internet import reactor
from twisted.internet.defer import Deferred

from vmservice.client.shell import ShellSession


class Screen:
    """What a session printed, read as it arrives."""

    def __init__(self, session: ShellSession) -> None:
        self.session = session
        self.text = b""
        self.ended = False

    async def until(self, predicate: Callable[[bytes], bool], timeout: float = 60.0) -> bytes:
        """Read until ``predicate(text)`` holds (or fail after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while not predicate(self.text):
            if self.ended:
                raise AssertionError(f"the session ended; screen: {self.text[-500:]!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; screen: {self.text[-500:]!r}")
            reading = Deferred.fromCoroutine(self.session.read())
            timer = reactor.callLater(max(0.1, deadline - time.monotonic()), reading.cancel)  # type: ignore[attr-defined]
            try:
                chunk: Optional[bytes] = await reading
            except Exception:
                continue
            finally:
                if timer.active():
                    timer.cancel()
            if chunk is None:
                self.ended = True
            else:
                self.text += chunk
        return self.text

    async def run(self, line: str, timeout: float = 60.0) -> str:
        """Type ``line`` and wait for its output between two markers; answer that output."""
        marker = f"M{os.urandom(4).hex()}"
        start = len(self.text)
        self.session.write(f"echo {marker}A; {line}; echo {marker}B\r".encode())
        pattern = re.compile(rf"{marker}A\r\n(.*?){marker}B\r\n".encode(), re.S)
        await self.until(lambda text: pattern.search(text, start) is not None, timeout)
        found = pattern.search(self.text, start)
        assert found is not None
        return found.group(1).decode(errors="replace")
