# -*- test-case-name: tests.client.test_records,tests.integration.test_client -*-
"""
The records of exec streams as the client hands them on: :class:`ExecRecord`
(decoded by :func:`decode_exec_record` from the lines an
:class:`NdjsonDecoder` splits) and a buffered exec's :class:`ExecResult`.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, TypeVar

from attrs import frozen

from .errors import ExecInterrupted

__all__ = ["ExecRecord", "ExecResult", "NdjsonDecoder", "decode_exec_record", "optional", "payload"]

_T = TypeVar("_T")


@frozen
class ExecRecord:
    """
    One record of an exec stream, decoded: payloads are bytes whatever the
    ``stdio`` mode, so callers never look at ``encoding``.

    :ivar type: ``started``, ``stdout``, ``stderr``, ``exit`` or ``error``
        (other types a newer daemon adds are passed on unchanged).
    :ivar pid: the process id in the guest, when known.
    :ivar data: the output of a ``stdout``/``stderr`` record; ``b""`` otherwise.
    :ivar exit_code: of ``exit`` and ``error`` records (128+N for signal N).
    :ivar signal: the signal's name (``"SIGTERM"``) when one ended the process.
    :ivar error: the message of an ``error`` record.
    :ivar started_at: RFC 3339, on ``started`` records.
    :ivar ended_at: RFC 3339, on ``exit`` records.
    :ivar timestamp: when the daemon wrote the record.
    :ivar id: the frame's place in a background exec's log (from 1); ``None`` elsewhere.
    :ivar message: what a ``gap`` record of a background exec's log says was dropped.
    :ivar dropped_bytes: the output bytes a ``gap`` record says were dropped.
    """

    type: str
    pid: int | None = None
    data: bytes = b""
    exit_code: int | None = None
    signal: str | None = None
    error: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    timestamp: str | None = None
    id: int | None = None
    message: str | None = None
    dropped_bytes: int | None = None

    @property
    def final(self) -> bool:
        """Whether this record ends the stream (``exit`` or ``error``)."""
        return self.type in ("exit", "error")


@frozen
class ExecResult:
    """
    A finished command (``buffered=true``), its output as bytes.

    :ivar exit_code: the command's exit status; 128+N for signal N.
    :ivar signal: the signal's name when one ended the process.
    :ivar error: set when the command could not be started.
    """

    stdout: bytes
    stderr: bytes
    exit_code: int
    pid: int | None = None
    signal: str | None = None
    error: str | None = None
    started_at: str | None = None
    ended_at: str | None = None

def payload(value: object, encoding: object) -> bytes:
    """The bytes of a record's payload: base64 decoded, or text as UTF-8; ``b""`` when there is none."""
    if not isinstance(value, str):
        return b""
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ExecInterrupted(f"a record's base64 data does not decode: {value[:40]!r}") from None
    return value.encode("utf-8", "surrogatepass")


def optional(value: object, kind: type[_T]) -> _T | None:
    """``value`` when it is a ``kind`` (a bool is no int here), else ``None``."""
    return value if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) else None


def decode_exec_record(obj: Any) -> ExecRecord:
    """
    An :class:`ExecRecord` from one decoded NDJSON line.  Base64 payloads
    (``"encoding": "base64"``) are decoded; text payloads become UTF-8.  A
    legacy untyped frame (``stdout``/``stderr`` fields, or only
    ``exit_code``) is read as the typed record it stands for.

    :raise ExecInterrupted: ``obj`` is not a record (not an object, or a
        payload that does not decode).
    """
    if not isinstance(obj, dict):
        raise ExecInterrupted(f"not an exec record: {obj!r:.80}")
    kind = obj.get("type")
    encoding = obj.get("encoding")
    if isinstance(kind, str) and kind:
        data = payload(obj.get("data"), encoding)
    elif isinstance(obj.get("error"), str) and obj["error"]:
        kind, data = "error", b""
    elif "stdout" in obj or "stderr" in obj:
        kind = "stdout" if "stdout" in obj else "stderr"
        data = payload(obj.get(kind), encoding)
    elif "exit_code" in obj:
        kind, data = "exit", b""
    else:
        raise ExecInterrupted(f"not an exec record: {obj!r:.80}")
    return ExecRecord(
        type=kind,
        pid=optional(obj.get("pid"), int),
        data=data,
        exit_code=optional(obj.get("exit_code"), int),
        signal=optional(obj.get("signal"), str) or None,
        error=optional(obj.get("error"), str) or None,
        started_at=optional(obj.get("started_at"), str),
        ended_at=optional(obj.get("ended_at"), str),
        timestamp=optional(obj.get("timestamp"), str),
        id=optional(obj.get("id"), int),
        message=optional(obj.get("message"), str),
        dropped_bytes=optional(obj.get("dropped_bytes"), int),
    )


class NdjsonDecoder:
    """
    Splits a byte stream into JSON values, one per ``\n``-terminated line,
    whatever the chunking.  Blank lines are skipped; a line longer than
    ``max_line`` bytes is an error rather than unbounded memory.

    :param max_line: the longest line accepted, in bytes.
    """

    def __init__(self, max_line: int = 64 * 1024 * 1024) -> None:
        self._max_line = max_line
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        """
        The values completed by ``data``.

        :raise ValueError: a line is not JSON or too long.
        """
        self._pending += data
        values = []
        start = 0
        while True:
            end = self._pending.find(b"\n", start)
            if end < 0:
                break
            line = bytes(self._pending[start:end]).strip()
            start = end + 1
            if line:
                values.append(json.loads(line.decode("utf-8")))
        del self._pending[:start]
        if len(self._pending) > self._max_line:
            raise ValueError(f"a line longer than {self._max_line} bytes")
        return values

    def finish(self) -> list[Any]:
        """The value of a last line without its ``\n``, if any; call at the end."""
        line, self._pending = bytes(self._pending).strip(), bytearray()
        return [json.loads(line.decode("utf-8"))] if line else []
