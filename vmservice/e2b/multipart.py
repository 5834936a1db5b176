# -*- test-case-name: tests.e2b.test_multipart -*-
"""
A ``multipart/form-data`` body read as it arrives (RFC 7578, RFC 2046 §5.1):
:class:`MultipartReader` is fed the body's chunks and tells its
:class:`PartListener` of each part's head, its data as it comes, and its
end, holding no more than a delimiter's length of data between chunks.

Bounded: a part's head (its header lines) is at most
:data:`MAX_PART_HEAD` bytes, the line after a delimiter
:data:`MAX_LINE`, a body at most :data:`MAX_PARTS` parts; the preamble and
the epilogue are skipped.  Anything malformed raises :class:`MultipartError`.
"""

from __future__ import annotations

import re
from typing import Protocol

from attrs import frozen

#: Bytes of one part's header lines.
MAX_PART_HEAD = 16 * 1024
#: Bytes of the rest of a delimiter's line (transport padding).
MAX_LINE = 1024
#: Parts in one body.
MAX_PARTS = 1000
#: The longest boundary (RFC 2046).
MAX_BOUNDARY = 70

_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class MultipartError(Exception):
    """The body is not a ``multipart/form-data`` body this reader takes."""


@frozen
class PartHead:
    """
    What a part's headers say.

    :ivar name: its form field's name (``Content-Disposition``'s ``name``).
    :ivar filename: its ``filename``, or ``None``.
    """

    name: str
    filename: str | None


class PartListener(Protocol):
    """Hears a body's parts, in order."""

    def part(self, head: PartHead) -> None:
        """A part begins."""

    def data(self, data: bytes) -> None:
        """More of the current part's content."""

    def part_end(self) -> None:
        """The current part is complete."""


def boundary_of(content_type: bytes) -> bytes:
    """
    The boundary of a ``multipart/form-data`` content type.

    :raise MultipartError: another type, or no usable boundary.
    """
    media, _, rest = content_type.partition(b";")
    if media.strip().lower() != b"multipart/form-data":
        raise MultipartError("the body is not multipart/form-data")
    params = _parameters(rest)
    boundary = params.get("boundary", "").encode("latin-1")
    if not 0 < len(boundary) <= MAX_BOUNDARY:
        raise MultipartError("the multipart body has no usable boundary")
    return boundary


def _parameters(text: bytes) -> dict[str, str]:
    """``; name=value`` parameters (values a token or a quoted string), names lower-cased."""
    params: dict[str, str] = {}
    rest = text.strip()
    while rest:
        rest = rest.lstrip(b"; \t")
        if not rest:
            break
        name, equals, rest = rest.partition(b"=")
        if not equals:
            break
        rest = rest.lstrip()
        if rest.startswith(b'"'):
            value, rest = _quoted(rest)
        else:
            found = _TOKEN.match(rest)
            value = found.group(0).decode("latin-1") if found else ""
            rest = rest[len(value):]
        params[name.strip().lower().decode("latin-1")] = value
    return params


def _quoted(text: bytes) -> tuple[str, bytes]:
    """A quoted string at the start of ``text`` (backslash escapes), and what follows it."""
    out = bytearray()
    index = 1
    while index < len(text):
        char = text[index:index + 1]
        if char == b"\\" and index + 1 < len(text):
            out += text[index + 1:index + 2]
            index += 2
            continue
        if char == b'"':
            return out.decode("utf-8", "replace").replace("%22", '"'), text[index + 1:]
        out += char
        index += 1
    raise MultipartError("a quoted parameter does not end")


def part_head(raw: bytes) -> PartHead:
    """The :class:`PartHead` of a part's raw header lines."""
    disposition = None
    for line in raw.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == b"content-disposition":
            disposition = value.strip()
    if disposition is None:
        raise MultipartError("a part has no Content-Disposition")
    kind, _, rest = disposition.partition(b";")
    if kind.strip().lower() != b"form-data":
        raise MultipartError("a part is not form-data")
    params = _parameters(rest)
    return PartHead(params.get("name", ""), params.get("filename"))


class MultipartReader:
    """
    Reads one body for ``listener``: :meth:`feed` each chunk, then :meth:`end`.

    :param boundary: the body's boundary (:func:`boundary_of`).
    """

    def __init__(self, boundary: bytes, listener: PartListener) -> None:
        self._delimiter = b"\r\n--" + boundary
        self._listener = listener
        self._buffer = b"\r\n"  # the first delimiter may open the body: it then ends an empty preamble
        self._state = "preamble"
        self._parts = 0

    @property
    def done(self) -> bool:
        """Whether the closing delimiter was read."""
        return self._state == "done"

    def feed(self, data: bytes) -> None:
        """Read ``data``, the body's next bytes."""
        if self._state == "done":
            return
        self._buffer += data
        while self._step():
            pass

    def end(self) -> None:
        """The body ended: it must have been complete."""
        if self._state != "done":
            raise MultipartError("the multipart body ends before its closing delimiter")

    def _step(self) -> bool:
        """Move on as far as the buffer allows; whether to try again."""
        if self._state in ("preamble", "body"):
            return self._scan()
        if self._state == "delimited":
            return self._after_delimiter()
        if self._state == "head":
            return self._head()
        self._buffer = b""
        return False

    def _scan(self) -> bool:
        found = self._buffer.find(self._delimiter)
        body = self._state == "body"
        if found < 0:
            keep = len(self._delimiter) - 1
            if len(self._buffer) > keep:
                if body:
                    self._listener.data(self._buffer[:-keep])
                self._buffer = self._buffer[-keep:]
            return False
        if body:
            if found:
                self._listener.data(self._buffer[:found])
            self._listener.part_end()
        self._buffer = self._buffer[found + len(self._delimiter):]
        self._state = "delimited"
        return True

    def _after_delimiter(self) -> bool:
        if len(self._buffer) < 2:
            return False
        if self._buffer.startswith(b"--"):
            self._state, self._buffer = "done", b""
            return False
        line_end = self._buffer.find(b"\r\n")
        if line_end < 0:
            if len(self._buffer) > MAX_LINE:
                raise MultipartError("a delimiter's line is too long")
            return False
        if self._buffer[:line_end].strip(b" \t"):
            raise MultipartError("a delimiter is followed by something else")
        self._buffer = self._buffer[line_end + 2:]
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise MultipartError(f"the body has over {MAX_PARTS} parts")
        self._state = "head"
        return True

    def _head(self) -> bool:
        if self._buffer.startswith(b"\r\n"):
            raw, self._buffer = b"", self._buffer[2:]
        else:
            found = self._buffer.find(b"\r\n\r\n")
            if found < 0:
                if len(self._buffer) > MAX_PART_HEAD:
                    raise MultipartError(f"a part's headers are over {MAX_PART_HEAD} bytes")
                return False
            raw, self._buffer = self._buffer[:found], self._buffer[found + 4:]
        if len(raw) > MAX_PART_HEAD:
            raise MultipartError(f"a part's headers are over {MAX_PART_HEAD} bytes")
        self._listener.part(part_head(raw))
        self._state = "body"
        return True


__all__ = ["MAX_LINE", "MAX_PARTS", "MAX_PART_HEAD", "MultipartError", "MultipartReader", "PartHead",
           "PartListener", "boundary_of", "part_head"]
