# -*- test-case-name: tests.wire.test_payloads -*-
"""
What travels inside some streams, as pure codecs shared by the host and the
guest (stdlib only, like the rest of :mod:`vmservice.wire`).

- An exec stream's guest-to-host bytes are *records*: ``type u8 | length u32 |
  payload`` (STARTED and EXIT carry JSON, STDOUT/STDERR raw bytes).
- A download stream starts with a *head*: ``length u32 | JSON`` (the reply:
  ok and the source's type, name, mode and size, or an error), then raw bytes.

``docs/agent-protocol.md`` documents both.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

#: Record types.
STARTED = 1
STDOUT = 2
STDERR = 3
EXIT = 4
ERROR = 5
REJECTED = 6
RECORD_TYPES = frozenset({STARTED, STDOUT, STDERR, EXIT, ERROR, REJECTED})

#: ``type u8 | length u32``.
_RECORD_HEADER = struct.Struct(">BI")
#: Largest payload a decoder accepts (the agent sends at most 64 KiB at a time).
MAX_RECORD_PAYLOAD = 1024 * 1024


class RecordError(ValueError):
    """
    The record stream does not parse: unknown type or an oversized payload.
    """


def encode_record(kind: int, payload: bytes = b"") -> bytes:
    """
    One record: ``type u8 | length u32 | payload``.

    :param kind: one of :data:`RECORD_TYPES`.
    :param payload: the bytes (JSON for control records).
    """
    if kind not in RECORD_TYPES:
        raise RecordError(f"unknown record type {kind}")
    if len(payload) > MAX_RECORD_PAYLOAD:
        raise RecordError(f"record payload of {len(payload)} bytes is too large")
    return _RECORD_HEADER.pack(kind, len(payload)) + payload


def encode_json_record(kind: int, value: Mapping[str, Any]) -> bytes:
    """
    A control record whose payload is compact JSON.
    """
    return encode_record(kind, json.dumps(value, separators=(",", ":")).encode("utf-8"))


def started_record(pid: int) -> bytes:
    """
    The ``STARTED`` record: byte for byte what :func:`encode_json_record` makes of
    ``{"pid": pid}``, without :mod:`json` (about 0.4 ms a call under TCG, on the
    path of every exec).
    """
    return encode_record(STARTED, b'{"pid":%d}' % pid)


def exit_record(exit_code: int, signal_name: Optional[str]) -> bytes:
    """
    The ``EXIT`` record: byte for byte what :func:`encode_json_record` makes of
    ``{"exit_code": exit_code, "signal": signal_name}``, without :mod:`json`.

    :param signal_name: a signal's name (``SIGKILL``, ``SIG64``: ASCII letters
        and digits only), or ``None``.
    """
    if signal_name is None:
        name = b"null"
    elif signal_name.isascii() and signal_name.isalnum():
        name = b'"%s"' % signal_name.encode("ascii")
    else:
        return encode_json_record(EXIT, {"exit_code": exit_code, "signal": signal_name})
    return encode_record(EXIT, b'{"exit_code":%d,"signal":%s}' % (exit_code, name))


@dataclass(frozen=True)
class Record:
    """
    One decoded record.

    :ivar kind: its type.
    :ivar payload: its bytes.
    """

    kind: int
    payload: bytes

    def json(self) -> dict[str, Any]:
        """
        The payload of a control record as a JSON object.

        :raises RecordError: if it is not one.
        """
        try:
            value = json.loads(self.payload)
        except ValueError:
            raise RecordError("record payload is not JSON") from None
        if not isinstance(value, dict):
            raise RecordError("record payload is not a JSON object")
        return value


class RecordDecoder:
    """
    Incremental decoder: feed bytes in any fragmentation, take whole records out.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[Record]:
        """
        Add ``data`` and yield every record it completes.

        :raises RecordError: on an unknown type or an oversized length.
        """
        self._buffer += data
        while len(self._buffer) >= _RECORD_HEADER.size:
            kind, length = _RECORD_HEADER.unpack_from(self._buffer)
            if kind not in RECORD_TYPES:
                raise RecordError(f"unknown record type {kind}")
            if length > MAX_RECORD_PAYLOAD:
                raise RecordError(f"record payload of {length} bytes is too large")
            end = _RECORD_HEADER.size + length
            if len(self._buffer) < end:
                return
            payload = bytes(self._buffer[_RECORD_HEADER.size:end])
            del self._buffer[:end]
            yield Record(kind, payload)

    @property
    def partial(self) -> int:
        """
        Bytes held of an incomplete record (non-zero at the end means truncation).
        """
        return len(self._buffer)


#: ``length u32`` of a download's head.
_HEAD = struct.Struct(">I")
#: Largest head the host accepts.
MAX_HEAD = 64 * 1024


def encode_head(reply: Mapping[str, Any]) -> bytes:
    """
    A download head: ``length u32 | compact JSON``.
    """
    body = json.dumps(reply, separators=(",", ":")).encode("utf-8")
    return _HEAD.pack(len(body)) + body


def decode_head(buffer: bytes) -> Optional[tuple[dict[str, Any], int]]:
    """
    The head at the start of ``buffer`` and the bytes it takes, or ``None``
    while it is incomplete.

    :raises ValueError: the head is longer than :data:`MAX_HEAD` or not a JSON object.
    """
    if len(buffer) < _HEAD.size:
        return None
    (length,) = _HEAD.unpack_from(buffer)
    if length > MAX_HEAD:
        raise ValueError(f"head of {length} bytes is too large")
    end = _HEAD.size + length
    if len(buffer) < end:
        return None
    value = json.loads(bytes(buffer[_HEAD.size:end]))
    if not isinstance(value, dict):
        raise ValueError("head is not a JSON object")
    return value, end
