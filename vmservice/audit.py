# -*- test-case-name: tests.test_audit -*-
"""
The audit log: one JSON line for every state-changing request the API
answered or refused, for the operator who must later say who did what.

A line holds the time, the peer, the identity of the token presented (its
label or digest, never the token; ``null`` with authentication off), the
method, the route's template (never the raw path), the values of the path
(a node's hostname, a secret's name, a host group: names the API checked),
the status answered and the error code of a refusal.  It never holds a
request body, a query string (an exec's command line may carry a password)
or a header's value: nothing a secret could be in.

The file is private (0600 in a 0700 directory), written a line at a time,
and rotated by size: ``audit.log`` becomes ``audit.log.1`` and so on, the
oldest beyond ``keep`` removed.
"""

from __future__ import annotations

import json
import os
import time
from typing import Mapping

import attrs
from twisted.python.logfile import LogFile

#: Methods named as they are; any other is written ``OTHER`` (a client
#: chooses the method: it must not grow the log's vocabulary).
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT"})

#: The most characters of a path value kept in a line (the API refuses
#: longer names anyway; a refused request's values are cut).
MAX_VALUE = 256


@attrs.frozen(kw_only=True)
class AuditEntry:
    """
    One audited request.

    :ivar at: when it was answered, POSIX seconds.
    :ivar peer: who sent it: ``address:port``, or ``unix`` for a UNIX socket.
    :ivar token: the identity of the token presented, ``None`` without one.
    :ivar method: the HTTP method.
    :ivar route: the route's template (``/vm/{hostname}/exec``), or
        ``unmatched`` when no route took the request.
    :ivar target: the path's values by name.
    :ivar status: the HTTP status answered.
    :ivar code: the ErrorResponse's code of a refusal, else ``None``.
    """

    at: float
    peer: str
    token: str | None
    method: str
    route: str
    target: Mapping[str, str] = attrs.field(factory=dict)
    status: int
    code: str | None = None

    def line(self) -> bytes:
        """The entry as one JSON line."""
        seconds = int(self.at)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int((self.at - seconds) * 1000):03d}Z"
        record = {
            "time": stamp,
            "peer": self.peer,
            "token": self.token,
            "method": self.method if self.method in KNOWN_METHODS else "OTHER",
            "route": self.route,
            "target": {name: value[:MAX_VALUE] for name, value in sorted(self.target.items())},
            "status": self.status,
            "code": self.code,
        }
        return json.dumps(record, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


class AuditLog:
    """
    The audit log file, rotated by size.

    :param path: the log file; its directory is made 0700 if missing.
    :param max_bytes: the size at which the file is rotated.
    :param keep: how many rotated files are kept.
    """

    def __init__(self, path: str, max_bytes: int, keep: int) -> None:
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.path = path
        self._file = LogFile(
            os.path.basename(path), directory, rotateLength=max_bytes, defaultMode=0o600, maxRotatedFiles=keep
        )
        os.chmod(path, 0o600)

    def record(self, entry: AuditEntry) -> None:
        """Write ``entry`` (one line, at once)."""
        self._file.write(entry.line())

    def close(self) -> None:
        """Close the file."""
        self._file.close()


__all__ = ["AuditEntry", "AuditLog", "KNOWN_METHODS"]
