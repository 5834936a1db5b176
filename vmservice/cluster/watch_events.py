# -*- test-case-name: tests.cluster.test_watch_events -*-
"""
The events of a Kubernetes watch stream (pure, bytes in, events out): one
JSON object a line, ``{"type": ..., "object": {...}}``.  A line is bounded
(:data:`MAX_EVENT_LINE`): a longer one is refused before it is whole, so a
hostile server cannot make the daemon hold more.  An ``ERROR`` event whose
``Status`` has code 410 says the watch's resourceVersion is too old
(:attr:`WatchEvent.expired`): the watcher lists again.
"""

from __future__ import annotations

import json
from typing import Any

from attrs import frozen

#: The most bytes of one event line (an object of the API is at most 1.5 MiB in etcd; a pod far less).
MAX_EVENT_LINE = 2 * 1024 * 1024
#: The event types a watch sends.
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")


class WatchDecodeError(ValueError):
    """The stream is not a stream of watch events (a line too long, not JSON, not an event)."""


@frozen
class WatchEvent:
    """
    One event of a watch.

    :ivar type: One of :data:`EVENT_TYPES`.
    :ivar object: The object (a ``Status`` for ``ERROR``).
    """

    type: str
    object: dict[str, Any]

    @property
    def expired(self) -> bool:
        """Whether it says the resourceVersion watched from is too old (410 Gone): list again."""
        return self.type == "ERROR" and self.object.get("kind") == "Status" and self.object.get("code") == 410

    @property
    def resource_version(self) -> str | None:
        """The object's ``metadata.resourceVersion``, if it has one."""
        metadata = self.object.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        return version if isinstance(version, str) and version else None


def parse_event(line: bytes) -> WatchEvent:
    """One line as an event; :raise WatchDecodeError: it is not one."""
    try:
        document = json.loads(line)
    except ValueError:
        raise WatchDecodeError("a line of the watch is not JSON") from None
    if not isinstance(document, dict):
        raise WatchDecodeError("a line of the watch is not a JSON object")
    kind, item = document.get("type"), document.get("object")
    if kind not in EVENT_TYPES or not isinstance(item, dict):
        raise WatchDecodeError(f"not a watch event (type {str(kind)[:40]!r})")
    return WatchEvent(str(kind), item)


class WatchDecoder:
    """
    Watch events out of a stream's bytes, in whatever pieces they come.

    :param max_line: the most bytes of one line (its newline not counted).
    """

    def __init__(self, max_line: int = MAX_EVENT_LINE) -> None:
        self._max_line = max_line
        self._pending: list[bytes] = []
        self._size = 0

    def feed(self, data: bytes) -> list[WatchEvent]:
        """
        The events completed by ``data``.

        :raise WatchDecodeError: a line is too long or not an event (the
            stream cannot be trusted further).
        """
        events = []
        while data:
            end = data.find(b"\n")
            if end < 0:
                self._keep(data)
                break
            self._keep(data[:end])
            line, self._pending, self._size = b"".join(self._pending), [], 0
            data = data[end + 1:]
            if line.strip():
                events.append(parse_event(line))
        return events

    def _keep(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._size > self._max_line:
            raise WatchDecodeError(f"a line of the watch is longer than {self._max_line} bytes")
        self._pending.append(piece)

    def end(self) -> list[WatchEvent]:
        """The stream ended: the last line, if it had no newline; :raise WatchDecodeError: it is not an event."""
        line, self._pending, self._size = b"".join(self._pending), [], 0
        return [parse_event(line)] if line.strip() else []


__all__ = ["EVENT_TYPES", "MAX_EVENT_LINE", "WatchDecodeError", "WatchDecoder", "WatchEvent", "parse_event"]
