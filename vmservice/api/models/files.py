# -*- test-case-name: tests.api.test_openapi,tests.api.inputs.test_filesystem -*-
"""
Files in a guest: file-system entries, the answer to an upload, the body of a mkdir.
"""

from __future__ import annotations

from attrs import field, frozen

from ..query import FILE_MODE, GUEST_PATH
from .fields import constrained


@frozen
class FsEntry:
    """
    One file-system entry in a guest (readdir items, stat, mkdir and remove
    results).  ``mtime`` is RFC 3339 in UTC with up to nanosecond digits, because
    existing clients decode it as a time; ``mode`` is octal text of the permission
    bits including setuid/setgid/sticky (``0644``, ``1777``).
    """

    name: str
    type: str
    size: int
    mtime: str
    mode: str


@frozen
class CopyResult:
    """
    The answer to an upload (``POST /vm/{hostname}/cp``): where it was written,
    in which mode, how many body bytes arrived and, for a tar, how many entries
    were extracted.
    """

    path: str
    mode: str
    size: int
    entries: int | None = None


@frozen
class FsMkdirRequest:
    """
    The body of ``POST /vm/{hostname}/fs/mkdir``.  ``mode`` is octal text
    (``0755``, the default when absent or empty).
    """

    path: str = field(metadata={"schema": GUEST_PATH.schema()})
    recursive: bool | None = None
    mode: str | None = constrained({"pattern": f"^(?:{FILE_MODE.pattern})?$"})
