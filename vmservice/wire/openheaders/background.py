# -*- test-case-name: tests.wire.test_requestheaders -*-
"""
The OPEN headers of the requests about background execs
(``{"op": "background", "action": ...}``) other than ``start`` (which is
:class:`~vmservice.wire.openheaders.exec.BackgroundStartHeader`): ``list``,
``info``, ``kill``, ``wait``, ``delete`` and ``logs``, written by the host and
read by the guest (documented in ``docs/agent-protocol.md``).  Stdlib only:
the guest imports this module.

The guest looks the exec up by the header's ``exec_id`` before it reads the
rest of the header, so that an unknown or deleted exec is answered as such
(``not_found``, ``gone``) before a wrong field is (``invalid``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Mapping

from vmservice.wire.openheaders.fields import BadHeader, FlatHeader

#: What ``action`` may be.
ACTIONS = ("start", "list", "info", "kill", "wait", "delete", "logs")
#: The signals a kill may send, by name.
SIGNAL_NAMES = ("TERM", "KILL", "HUP", "INT", "QUIT", "USR1", "USR2")
#: Milliseconds between the signal of a kill and SIGKILL when the request gives none, and the most accepted.
DEFAULT_GRACE_MS = 5000
MAX_GRACE_MS = 3_600_000
#: Milliseconds a wait lasts when the request gives none, and the most accepted.
DEFAULT_WAIT_MS = 30_000
MAX_WAIT_MS = 24 * 3_600_000
#: The largest log frame id a reading may start from.
MAX_LOG_ID = 2**63 - 1

def _count(header: Mapping[str, Any], name: str, default: int, high: int) -> int:
    value = header.get(name, default)
    if type(value) is not int or not 0 <= value <= high:
        raise BadHeader(f"{name} must be an integer 0 .. {high}")
    return value


def _exec_id(header: Mapping[str, Any]) -> str:
    exec_id = header.get("exec_id")
    if not isinstance(exec_id, str):
        raise BadHeader("exec_id must be a string")
    return exec_id


@dataclass(frozen=True)
class _BackgroundRequest(FlatHeader):
    """A request about background execs; each kind names its :attr:`action`."""

    op: ClassVar[str] = "background"
    action: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object: ``op``, ``action``, then the fields in their order."""
        return {"op": self.op, "action": self.action, **asdict(self)}

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> tuple[Any, ...]:
        return ()


@dataclass(frozen=True)
class BackgroundListHeader(_BackgroundRequest):
    """Every exec the guest keeps: the header of a ``list`` request, which has no fields."""

    action: ClassVar[str] = "list"


@dataclass(frozen=True)
class _ExecRequest(_BackgroundRequest):
    """
    A request about one exec (its ``action`` is not looked at when read).

    :ivar exec_id: the exec's id (``ex_...``); first read, and it must be a string.
    """

    exec_id: str

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> tuple[Any, ...]:
        return (_exec_id(header),)


@dataclass(frozen=True)
class BackgroundInfoHeader(_ExecRequest):
    """What the guest knows of one exec: the header of an ``info`` request."""

    action: ClassVar[str] = "info"


@dataclass(frozen=True)
class BackgroundDeleteHeader(_ExecRequest):
    """Forget an exec that has ended: the header of a ``delete`` request."""

    action: ClassVar[str] = "delete"


@dataclass(frozen=True)
class BackgroundKillHeader(_ExecRequest):
    """
    Signal an exec's process group: the header of a ``kill`` request.

    :ivar signal: one of :data:`SIGNAL_NAMES` (read after ``exec_id``).
    :ivar grace_ms: after ``TERM``, ``HUP``, ``INT`` or ``QUIT``, milliseconds
        before ``KILL`` follows (0 .. :data:`MAX_GRACE_MS`; read last).
    """

    action: ClassVar[str] = "kill"
    signal: str = "TERM"
    grace_ms: int = DEFAULT_GRACE_MS

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> tuple[Any, ...]:
        exec_id = _exec_id(header)
        name = header.get("signal", "TERM")
        if not isinstance(name, str) or name not in SIGNAL_NAMES:
            raise BadHeader(f"signal must be one of {', '.join(SIGNAL_NAMES)}")
        return (exec_id, name, _count(header, "grace_ms", DEFAULT_GRACE_MS, MAX_GRACE_MS))


@dataclass(frozen=True)
class BackgroundWaitHeader(_ExecRequest):
    """
    Wait for an exec's end: the header of a ``wait`` request.

    :ivar timeout_ms: the longest wait (0 .. :data:`MAX_WAIT_MS`; 0 answers at once).
    """

    action: ClassVar[str] = "wait"
    timeout_ms: int = DEFAULT_WAIT_MS

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> tuple[Any, ...]:
        return (_exec_id(header), _count(header, "timeout_ms", DEFAULT_WAIT_MS, MAX_WAIT_MS))


@dataclass(frozen=True)
class BackgroundLogsHeader(_ExecRequest):
    """
    Read an exec's log: the header of a ``logs`` stream.

    :ivar from_id: the first frame wanted (0: the oldest in the ring; 1: from
        the very start, with a GAP for what was evicted); read after ``exec_id``.
    :ivar follow: keep the stream open for new frames until the exec ends (read last).
    """

    action: ClassVar[str] = "logs"
    from_id: int = 0
    follow: bool = False

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> tuple[Any, ...]:
        exec_id, from_id = _exec_id(header), _count(header, "from_id", 0, MAX_LOG_ID)
        follow = header.get("follow", False)
        if not isinstance(follow, bool):
            raise BadHeader("follow must be a boolean")
        return (exec_id, from_id, follow)


#: The record of each action about one exec, by action.
EXEC_REQUESTS: dict[str, type[_ExecRequest]] = {
    kind.action: kind
    for kind in (BackgroundInfoHeader, BackgroundKillHeader, BackgroundWaitHeader, BackgroundDeleteHeader,
                 BackgroundLogsHeader)
}

__all__ = [
    "ACTIONS",
    "BackgroundDeleteHeader",
    "BackgroundInfoHeader",
    "BackgroundKillHeader",
    "BackgroundListHeader",
    "BackgroundLogsHeader",
    "BackgroundWaitHeader",
    "DEFAULT_GRACE_MS",
    "DEFAULT_WAIT_MS",
    "EXEC_REQUESTS",
    "MAX_GRACE_MS",
    "MAX_LOG_ID",
    "MAX_WAIT_MS",
    "SIGNAL_NAMES",
]
