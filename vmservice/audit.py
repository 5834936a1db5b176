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

import errno
import json
import os
import time
from typing import Mapping

import attrs
from twisted.logger import Logger
from twisted.python.logfile import LogFile

log = Logger()

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


class _WholeLines(LogFile):
    """
    A :class:`LogFile` that writes whole lines or nothing: a line the file
    system takes only part of (a short write: it has no room for the rest)
    is cut off again and the write fails, so the next line never follows
    half of one.
    """

    def write(self, data: bytes) -> None:
        if self.shouldRotate():  # type: ignore[no-untyped-call]  # Twisted's LogFile is not annotated
            self.flush()  # type: ignore[no-untyped-call]  # (as above)
            self.rotate()  # type: ignore[no-untyped-call]  # (as above)
        before = self._file.tell()
        try:
            written = self._file.write(data)  # unbuffered: one write(2)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (wrote {written} of {len(data)} bytes)")
        except OSError:
            self._file.truncate(before)
            self._file.seek(before)
            raise
        self.size += len(data)


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
        self._file = _WholeLines(  # type: ignore[no-untyped-call]  # Twisted's LogFile is not annotated
            os.path.basename(path), directory, rotateLength=max_bytes, defaultMode=0o600, maxRotatedFiles=keep
        )
        os.chmod(path, 0o600)

    def record(self, entry: AuditEntry) -> None:
        """
        Write ``entry`` (one whole line, at once).  A line that cannot be
        written (the state directory is full) never fails the request it
        records: it goes to the daemon's log instead, with the reason (it
        holds nothing a secret could be in), and the file keeps no part of it.
        """
        line = entry.line()
        try:
            self._file.write(line)
        except OSError as error:
            log.error("audit log {path}: the line could not be written ({error}); it was: {line}",
                      path=self.path, error=error.strerror or error, line=line.decode("ascii").rstrip("\n"))

    def close(self) -> None:
        """Close the file."""
        self._file.close()  # type: ignore[no-untyped-call]  # Twisted's LogFile is not annotated


__all__ = ["AuditEntry", "AuditLog", "KNOWN_METHODS"]
