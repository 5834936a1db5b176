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
)
from vmservice.wire.events import (
    NEED_DATA,
    NO_NONCE,
    PROTOCOL_VERSION,
    Data,
    Event,
    HalfClose,
    Hello,
    Open,
    Ping,
    Pong,
    Reset,
    WindowUpdate,
)
from vmservice.wire.frames import MAX_FRAME, MAX_PAYLOAD

__all__ = [
    "Connection",
    "Data",
    "Event",
    "FlowControlError",
    "HalfClose",
    "Hello",
    "INITIAL_WINDOW",
    "LocalProtocolError",
    "MAX_FRAME",
    "MAX_PAYLOAD",
    "NEED_DATA",
    "NO_NONCE",
    "Open",
    "PROTOCOL_VERSION",
    "Ping",
    "Pong",
    "RemoteProtocolError",
    "Reset",
    "ResetCode",
    "Role",
    "WINDOW_UPDATE_THRESHOLD",
    "WindowUpdate",
    "WireError",
]
