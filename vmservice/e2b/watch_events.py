# -*- test-case-name: tests.e2b.test_watching -*-
"""
A guest's watch events as envd's ``FilesystemEvent``\\ s.

envd writes an uploaded file in place, so a watcher sees fsnotify's
``create`` then ``write``\\ s of its name.  The guest writes it beside its
name (``.<name>.vmservice-<12 hex>``) and renames it over the name, so its
watch reports the temporary file's ``create``, ``write``\\ s, ``chmod`` and
``rename``, then a ``create`` of the name.  :class:`EventFolding` shows
that as envd would: the temporary file's events as the name's, its rename
and the name's ``create`` that follows it left out.  It remembers at most
:data:`MAX_PENDING` renames whose ``create`` has not come yet.
"""

from __future__ import annotations

import posixpath
import re
from collections import OrderedDict
from typing import Any

from ..guestport.watch import WatchEvent

#: envd's event types, by the guest's.
EVENT_TYPES = {"create": "EVENT_TYPE_CREATE", "write": "EVENT_TYPE_WRITE", "remove": "EVENT_TYPE_REMOVE",
               "rename": "EVENT_TYPE_RENAME", "chmod": "EVENT_TYPE_CHMOD"}
#: The guest's temporary file of an upload to ``<name>`` (``vmservice.guest.copying.writing.temp_name``).
TEMPORARY = re.compile(r"\.(?P<name>.+)\.vmservice-[0-9a-f]{12}")
#: Renames of temporary files remembered until the name's ``create`` comes.
MAX_PENDING = 1000


def event_message(event: WatchEvent, root: str) -> dict[str, Any] | None:
    """The ``FilesystemEvent`` of ``event`` under the watched ``root`` (``None`` for an overflow)."""
    kind = EVENT_TYPES.get(event.type)
    if kind is None:
        return None
    return {"name": posixpath.relpath(event.path, root), "type": kind}


class EventFolding:
    """One watch's events, an upload's temporary file folded into its name."""

    def __init__(self) -> None:
        self._moved_in: OrderedDict[str, None] = OrderedDict()

    def fold(self, event: WatchEvent) -> WatchEvent | None:
        """What ``event`` shows, or ``None`` when it shows nothing."""
        directory, base = posixpath.split(event.path)
        temporary = TEMPORARY.fullmatch(base)
        if temporary is not None:
            final = posixpath.join(directory, temporary.group("name"))
            if event.type == "rename":
                self._moved_in[final] = None
                while len(self._moved_in) > MAX_PENDING:
                    self._moved_in.popitem(last=False)
                return None
            if event.type == "remove":
                return None  # an upload that failed: its file was never the name's
            return WatchEvent(event.type, final, event.size, event.is_dir, event.message)
        if event.type == "create" and event.path in self._moved_in:
            del self._moved_in[event.path]
            return None
        return event


__all__ = ["EVENT_TYPES", "EventFolding", "MAX_PENDING", "TEMPORARY", "event_message"]
