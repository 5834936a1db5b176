# -*- test-case-name: tests.nodes.test_transitions -*-
"""
The node lifecycle as a table: what each operation does in each status.

:data:`TABLE` is the one place that says whether an operation goes ahead, is
already done (answered 200 without doing anything: scripted clients may
repeat a call), or conflicts with the node's status (409 with a code saying
why).  :func:`check` applies it; ``docs/lifecycle.md`` shows it
(:func:`markdown_table` renders it, and a test keeps the two equal).
"""

from __future__ import annotations

from enum import Enum

from ..errors import Conflict
from .model import Status


class Op(str, Enum):
    """The operations that depend on a node's status."""

    PAUSE = "pause"
    RESUME = "resume"
    SUSPEND = "suspend"
    RESTORE = "restore"
    RELAUNCH = "relaunch"
    SHUTDOWN = "shutdown"
    REBOOT = "reboot"
    AGENT = "exec, cp, fs"


class Outcome(str, Enum):
    """What :func:`check` decides."""

    GO = "go"
    DONE = "done"


#: A 409's code and the words that finish "node X ...".
_PAUSED = ("paused", "is paused")
_NOT_RUNNING = ("not_running", "is not running")
_RUNNING = ("already_running", "is already running")
_NO_SNAPSHOT = ("no_snapshot", "has no snapshot to restore")

_GO, _DONE = Outcome.GO, Outcome.DONE
_R, _P, _S, _U = Status.RUNNING, Status.PAUSED, Status.STOPPED, Status.SUSPENDED

#: Operation -> status -> outcome, or the (code, words) of the 409.
TABLE: dict[Op, dict[Status, Outcome | tuple[str, str]]] = {
    Op.PAUSE: {_R: _GO, _P: _DONE, _S: _NOT_RUNNING, _U: _NOT_RUNNING},
    Op.RESUME: {_R: _DONE, _P: _GO, _S: _NOT_RUNNING, _U: _NOT_RUNNING},
    Op.SUSPEND: {_R: _GO, _P: _GO, _S: _NOT_RUNNING, _U: _DONE},
    Op.RESTORE: {_R: _NO_SNAPSHOT, _P: _NO_SNAPSHOT, _S: _NO_SNAPSHOT, _U: _GO},
    Op.RELAUNCH: {_R: _RUNNING, _P: _RUNNING, _S: _GO, _U: _GO},
    Op.SHUTDOWN: {_R: _GO, _P: _PAUSED, _S: _NOT_RUNNING, _U: _NOT_RUNNING},
    Op.REBOOT: {_R: _GO, _P: _PAUSED, _S: _NOT_RUNNING, _U: _NOT_RUNNING},
    Op.AGENT: {_R: _GO, _P: _PAUSED, _S: _NOT_RUNNING, _U: _NOT_RUNNING},
}

#: The statuses a client sees, in the order the documentation lists them.
VISIBLE = (Status.RUNNING, Status.PAUSED, Status.STOPPED, Status.SUSPENDED)


def check(op: Op, hostname: str, status: Status) -> Outcome:
    """
    Decide ``op`` for node ``hostname`` in ``status``.

    :raise Conflict: the operation conflicts with the status (the code says
        why: ``paused``, ``not_running``, ``already_running``, ``no_snapshot``),
        or the node is in the middle of another operation (``busy``).
    """
    entry = TABLE[op].get(status)
    if entry is None:
        raise Conflict(f"node {hostname!r} is busy ({status.value})", code="busy")
    if isinstance(entry, Outcome):
        return entry
    code, words = entry
    raise Conflict(f"node {hostname!r} {words}", code=code)


def markdown_table() -> str:
    """:data:`TABLE` as the Markdown table of ``docs/lifecycle.md``."""
    lines = [
        "| operation | " + " | ".join(status.value for status in VISIBLE) + " |",
        "|---|" + "---|" * len(VISIBLE),
    ]
    for op, row in TABLE.items():
        cells = []
        for status in VISIBLE:
            entry = row[status]
            if entry is Outcome.GO:
                cells.append("200, goes ahead")
            elif entry is Outcome.DONE:
                cells.append("200, nothing to do")
            else:
                cells.append(f"409 `{entry[0]}`")
        lines.append(f"| {op.value} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["Op", "Outcome", "TABLE", "VISIBLE", "check", "markdown_table"]
