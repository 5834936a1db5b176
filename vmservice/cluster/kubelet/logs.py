# -*- test-case-name: tests.cluster.kubelet.test_logs -*-
"""
``GET /containerLogs/{namespace}/{pod}/{container}``: a VM's serial console
as ``kubectl logs`` shows a container's output (``text/plain``).

- The console as it is now: the newest :data:`MAX_SNAPSHOT` bytes of the
  retained log at most (within ``console_log_size``), ``\\r\\n`` as ``\\n``,
  invalid UTF-8 as U+FFFD; ``tailLines=N`` keeps its last N lines.
- The console has no time per line.  What was already written is dated by
  the log's last write: ``sinceSeconds``/``sinceTime`` give all of it when
  the log was written since then and none of it otherwise, and
  ``timestamps=true`` prefixes each of its lines with that time.  Lines that
  arrive while following carry the time they were read (within
  :data:`POLL` seconds of their writing).
- ``follow=true``: what the guest writes next, polled every :data:`POLL`
  seconds while the client takes what it was sent (a slow client is not
  read for), until the VM is gone or the client leaves.
- ``limitBytes=N``: the answer ends after N bytes (timestamps included).
"""

from __future__ import annotations

import codecs
from datetime import datetime, timezone
from typing import Callable, Optional

from twisted.internet.defer import CancelledError
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.web.server import Request

from ...api.console_body import ClientPace
from ...errors import NotFound
from ...nodes.blocking import Blocking
from . import console_files
from .params import LogsQuery

#: The most bytes of the console answered before following (the newest ones).
MAX_SNAPSHOT = 8 * 1024 * 1024
#: Seconds between two looks at a followed console, and the most bytes read at each.
POLL = 0.5
MAX_READ = 64 * 1024


def stamp(when: float) -> str:
    """``when`` (seconds since the epoch) in RFC 3339 with nanoseconds, in UTC, as the kubelet writes it."""
    moment = datetime.fromtimestamp(when, timezone.utc)
    nanos = int(round((when - int(when)) * 1e9)) % 1_000_000_000
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{nanos:09d}Z"


def since(query: LogsQuery, now: float) -> Optional[float]:
    """The earliest time asked for (seconds since the epoch), if any."""
    if query.since_time is not None:
        return query.since_time.timestamp()
    if query.since_seconds is not None:
        return now - query.since_seconds
    return None


class Shaper:
    """
    Console text as the query wants it written: timestamps at line starts,
    and nothing past ``limitBytes``.
    """

    def __init__(self, query: LogsQuery) -> None:
        self._timestamps = query.timestamps
        self._left = query.limit_bytes
        self._at_start = True

    @property
    def full(self) -> bool:
        """``limitBytes`` is reached."""
        return self._left is not None and self._left <= 0

    def shape(self, text: str, when: float) -> bytes:
        """``text`` (read at ``when``) as bytes to write."""
        if self._timestamps and text:
            prefix = stamp(when) + " "
            lines = text.splitlines(keepends=True)
            text = "".join((prefix if self._at_start or index else "") + line for index, line in enumerate(lines))
            self._at_start = text.endswith("\n")
        data = text.encode("utf-8")
        if self._left is not None:
            data, self._left = data[:self._left], self._left - len(data)
        return data


def first_text(query: LogsQuery, snapshot: console_files.Snapshot, now: float) -> str:
    """The part of the console as it is now that the query asks for."""
    earliest = since(query, now)
    if earliest is not None and snapshot.modified < earliest:
        return ""
    text = snapshot.data.decode("utf-8", "replace").replace("\r\n", "\n")
    if query.tail_lines is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[len(lines) - query.tail_lines:]) if query.tail_lines else ""
    return text


class Pace(ClientPace):
    """The client's pace (:class:`~vmservice.api.console_body.ClientPace`), and whether the client is gone."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped = False

    def stopProducing(self) -> None:
        self.stopped = True
        super().stopProducing()


class ConsoleLogs:
    """
    Writes one ``containerLogs`` answer.

    :param clock: the time of the lines, and the polls.
    :param blocking: runs the file reads off the reactor.
    :param console_path: a VM's console log by hostname (``NotFound`` once it is gone).
    :param limit: ``console_log_size``: the most bytes of a console kept.
    """

    def __init__(self, clock: IReactorTime, blocking: Blocking, console_path: Callable[[str], str], limit: int) -> None:
        self._clock = clock
        self._blocking = blocking
        self._console_path = console_path
        self._limit = min(limit, MAX_SNAPSHOT)

    async def write(self, request: Request, query: LogsQuery, hostname: str) -> None:
        """
        Answer ``request`` (200 once the console was read; the caller answers the errors raised before).

        :raise NotFound: no such VM.
        :raise Internal: its console cannot be read.
        """
        path = self._console_path(hostname)
        snapshot = await self._blocking(lambda: console_files.snapshot(path, self._limit))
        now = self._clock.seconds()
        shaper = Shaper(query)
        request.setResponseCode(200)
        request.setHeader(b"Content-Type", b"text/plain")
        request.setHeader(b"Cache-Control", b"no-store")
        request.write(shaper.shape(first_text(query, snapshot, now), snapshot.modified))
        if not query.follow or shaper.full:
            return
        pace = Pace()
        request.registerProducer(pace, True)
        request.notifyFinish().addErrback(lambda _: pace.stopProducing())
        try:
            await self._follow(request, hostname, snapshot.position, shaper, pace)
        finally:
            if not pace.stopped:
                request.unregisterProducer()

    async def _follow(self, request: Request, hostname: str, position: console_files.Position, shaper: Shaper,
                      pace: Pace) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while not pace.stopped and not shaper.full:
            await pace.ready()
            try:
                path = self._console_path(hostname)
            except NotFound:
                return
            data, position = await self._blocking(lambda: console_files.more(path, position, MAX_READ))
            if pace.stopped:
                return
            if data:
                text = decoder.decode(data).replace("\r\n", "\n")
                request.write(shaper.shape(text, self._clock.seconds()))
            if len(data) < MAX_READ and not shaper.full:
                try:
                    await deferLater(self._clock, POLL, lambda: None)
                except CancelledError:
                    return


__all__ = ["MAX_SNAPSHOT", "POLL", "ConsoleLogs", "Pace", "Shaper", "first_text", "since", "stamp"]
