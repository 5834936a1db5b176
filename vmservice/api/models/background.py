# -*- test-case-name: tests.api.test_openapi,tests.api.test_background -*-
"""
Background execs: started, described, killed, waited for, deleted.
"""

from __future__ import annotations

from datetime import datetime

from attrs import frozen

from .fields import constrained


@frozen
class BackgroundStarted:
    """What ``POST /vm/{hostname}/exec?background=true`` answers (201)."""

    exec_id: str
    pid: int
    started_at: datetime
    ring_bytes: int


@frozen
class BackgroundExec:
    """
    A background exec (``GET /vm/{hostname}/exec/{exec_id}`` and the list):
    ``exit_code``, ``signal`` and ``ended_at`` once it has ended; output
    counts in bytes; ``next_id`` is the id the next log frame gets.
    """

    exec_id: str
    pid: int
    command: str
    args: list[str]
    cwd: str
    uid: int
    gid: int
    started_at: datetime
    running: bool
    bytes_written: int
    bytes_dropped: int
    next_id: int
    ring_bytes: int
    exit_code: int | None = None
    signal: str | None = None
    ended_at: datetime | None = None


@frozen
class KillRequest:
    """
    The optional body of ``POST /vm/{hostname}/exec/{exec_id}/kill``: the
    signal (default ``TERM``; ``SIG`` prefix and case do not matter) and, for
    ``TERM``, ``HUP``, ``INT`` and ``QUIT``, the milliseconds before ``KILL``
    follows (default 5000).
    """

    signal: str | None = constrained({"pattern": "^(?i:(SIG)?(TERM|KILL|HUP|INT|QUIT|USR1|USR2))?$"})
    grace_ms: int | None = constrained({"minimum": 0, "maximum": 3_600_000})


@frozen
class KillResponse:
    """What a kill did: ``signal_sent`` is empty when the exec had already ended."""

    exec_id: str
    pid: int
    running: bool
    signal_sent: str


@frozen
class WaitExitResponse:
    """Where a wait for an exec's end stopped (200 even when it timed out)."""

    exec_id: str
    running: bool
    timed_out: bool
    exit_code: int | None = None
    signal: str | None = None
    ended_at: datetime | None = None


@frozen
class ExecDeleted:
    """What deleting an ended background exec answers."""

    exec_id: str
    reaped: bool
