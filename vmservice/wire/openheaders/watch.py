# -*- test-case-name: tests.wire.test_openheaders -*-
"""
The OPEN header of a watch (``{"op": "watch", ...}``, :class:`WatchHeader`),
written by the host and read by the guest (documented in
``docs/agent-protocol.md``).  Stdlib only: the guest imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from vmservice.wire.openheaders.fields import BadHeader, flag, header_object, is_int

#: The event types a watch may ask for (``overflow`` is always reported).
WATCH_EVENT_TYPES = ("create", "write", "remove", "rename", "chmod")
#: The longest debounce window accepted, in seconds.
MAX_DEBOUNCE = 3600.0


def _strings(header: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = header.get(name, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadHeader(f"{name} must be a list of strings")
    return tuple(value)


@dataclass(frozen=True)
class WatchHeader:
    """
    What to watch in the guest: the OPEN header of a watch stream.

    :ivar paths: absolute, or ``~``/``~/...`` (the home of ``uid``); at least one.
    :ivar patterns: globs on an entry's base name; empty for every name.
    :ivar events: the types reported (of :data:`WATCH_EVENT_TYPES`); empty for all.
    :ivar recursive: watch every directory below, and new ones as they appear.
    :ivar debounce: seconds within which events of one type and path become one; 0 for none.
    :ivar uid: whose home directory ``~`` is.
    """

    paths: tuple[str, ...]
    patterns: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    recursive: bool = False
    debounce: float = 0.0
    uid: int = 0

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object."""
        return {"op": "watch", "paths": list(self.paths), "patterns": list(self.patterns),
                "events": list(self.events), "recursive": self.recursive, "debounce": self.debounce, "uid": self.uid}

    @classmethod
    def from_json(cls, value: object) -> WatchHeader:
        """
        Read and check a header (its ``op`` is not looked at).

        :raises BadHeader: naming the field.
        """
        header = header_object(value)
        paths = _strings(header, "paths")
        if not paths:
            raise BadHeader("paths must name at least one path")
        events = _strings(header, "events")
        unknown = sorted(set(events) - set(WATCH_EVENT_TYPES))
        if unknown:
            raise BadHeader(f"unknown event types {unknown}: use {', '.join(WATCH_EVENT_TYPES)}")
        recursive = flag(header, "recursive")
        debounce = header.get("debounce", 0)
        if isinstance(debounce, bool) or not isinstance(debounce, (int, float)) or not 0 <= debounce <= MAX_DEBOUNCE:
            raise BadHeader(f"debounce must be 0 to {MAX_DEBOUNCE:g} seconds")
        uid = header.get("uid", 0)
        if not is_int(uid) or not 0 <= uid < 2**32:
            raise BadHeader("uid must be 0 .. 2^32-1")
        return cls(paths, _strings(header, "patterns"), events, recursive, float(debounce), uid)


__all__ = ["MAX_DEBOUNCE", "WATCH_EVENT_TYPES", "WatchHeader"]
