# -*- test-case-name: tests.wire -*-
"""
The agent wire protocol: a sans-IO codec shared by the host and the guest agent.

Stdlib only (the guest image copies these files).  See ``docs/agent-protocol.md``
for the bytes on the wire and :mod:`vmservice.wire.connection` for the states.
"""

from vmservice.wire.connection import (
    INITIAL_WINDOW,
    WINDOW_UPDATE_THRESHOLD,
    Connection,
    Role,
)
from vmservice.wire.errors import (
    FlowControlError,
    LocalProtocolError,
    RemoteProtocolError,
    ResetCode,
    WireError,
    reset_code_name,
)
from vmservice.wire import events
from vmservice.wire.events import *  # noqa: F403 (the events, listed in events.__all__)
from vmservice.wire.frames import MAX_FRAME, MAX_PAYLOAD

__all__ = [
    "Connection",
    "FlowControlError",
    "INITIAL_WINDOW",
    "LocalProtocolError",
    "MAX_FRAME",
    "MAX_PAYLOAD",
    "RemoteProtocolError",
    "ResetCode",
    "Role",
    "WINDOW_UPDATE_THRESHOLD",
    "WireError",
    "reset_code_name",
]
__all__ += events.__all__
