"""
A background exec's info as the guest agent answers it, started at :data:`T0`: the reply the fake
agents of the background exec tests give, on the host's side (:mod:`tests.agent.test_background`) and
behind the routes (:mod:`tests.api.test_background`).
"""

from __future__ import annotations

#: When the exec started (nanoseconds since the epoch).
T0 = 1_700_000_000_000_000_000
#: The exec's info: running, 3 bytes of output written.
INFO = {
    "exec_id": "ex_0123456789abcdef01234567", "pid": 42, "command": "sleep 9", "args": ["a"], "cwd": "/root",
    "uid": 0, "gid": 0, "started_ns": T0, "running": True, "exit_code": None, "signal": None, "ended_ns": None,
    "bytes_written": 3, "bytes_dropped": 0, "next_id": 2, "ring_bytes": 1024,
}
