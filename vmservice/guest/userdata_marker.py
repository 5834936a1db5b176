# -*- test-case-name: tests.guest.test_userdata -*-
"""
The node's userdata marker, read by every health reply and written by
:mod:`vmservice.guest.userdata`: a module of its own, so that neither the
health reply nor the agent's context imports the userdata runner.
"""

from __future__ import annotations

import vmservice.wire.jsontext as jsontext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping, Optional

#: Where the outcome of the node's userdata is kept, on the node's disk: a JSON object
#: whose ``state`` is ``running``, ``finished`` or ``interrupted`` (see
#: :mod:`vmservice.guest.userdata`, which writes it).  Read here, by every health reply,
#: so that health does not import the userdata module.
USERDATA_MARKER = "/var/lib/vmservice/userdata.json"
#: The states of :data:`USERDATA_MARKER` in which userdata is over.
USERDATA_OVER = ("finished", "interrupted")


def read_userdata_marker(path: str) -> Optional[dict[str, Any]]:
    """
    The userdata marker at ``path`` as a dict, or None when there is none (or it
    is unreadable: a write never leaves half a marker, see
    :func:`vmservice.guest.userdata.write_marker`).
    """
    try:
        with open(path, "rb") as stream:
            marker = jsontext.loads(stream.read(65536).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def userdata_ran(marker: Optional[Mapping[str, Any]]) -> bool:
    """Whether the node's userdata is over (or there was none to run)."""
    return marker is not None and marker.get("state") in USERDATA_OVER


__all__ = ["USERDATA_MARKER", "USERDATA_OVER", "read_userdata_marker", "userdata_ran"]
