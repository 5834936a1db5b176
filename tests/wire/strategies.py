# -*- test-case-name: tests.wire.test_frames -*-
"""
Hypothesis strategies for the events of :mod:`vmservice.wire`, shared by the codec
tests.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from vmservice.wire.events import (
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
from vmservice.wire.frames import MAX_STREAM_ID, MAX_WINDOW

stream_ids = st.integers(min_value=1, max_value=MAX_STREAM_ID)
eight_bytes = st.binary(min_size=8, max_size=8)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
headers = st.dictionaries(st.text(max_size=12), json_values, max_size=6)

hellos = st.builds(
    Hello,
    nonce=eight_bytes,
    echo=eight_bytes,
    agent_version=st.text(max_size=60),
    protocol_version=st.integers(min_value=0, max_value=0xFFFF),
)
opens = st.builds(Open, stream_id=stream_ids, header=headers)
datas = st.builds(Data, stream_id=stream_ids, data=st.binary(min_size=1, max_size=3000))
window_updates = st.builds(
    WindowUpdate, stream_id=stream_ids, increment=st.integers(min_value=1, max_value=MAX_WINDOW)
)
half_closes = st.builds(HalfClose, stream_id=stream_ids)
resets = st.builds(
    Reset,
    stream_id=stream_ids,
    code=st.integers(min_value=0, max_value=0xFFFFFFFF),
    reason=st.text(max_size=200),
)
pings = st.builds(Ping, opaque=eight_bytes)
pongs = st.builds(Pong, opaque=eight_bytes)

events: st.SearchStrategy[Event] = st.one_of(
    hellos, opens, datas, window_updates, half_closes, resets, pings, pongs
)


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """
    Cut ``data`` into consecutive chunks at arbitrary places (empty chunks included).
    """
    cuts = sorted(
        draw(st.lists(st.integers(min_value=0, max_value=len(data)), max_size=12))
    )
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]
