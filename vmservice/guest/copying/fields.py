# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
A copy's OPEN header, read through its record
(:mod:`vmservice.wire.openheaders.copy`): each refusal an ``invalid``
:class:`~vmservice.guest.filesystem.FsError`; and its ``path`` with ``~``
expanded.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, TypeVar

from vmservice.guest.copying.placement import home_of
from vmservice.guest.filesystem import FsError, resolve_path
from vmservice.wire.openheaders.copy import DOWNLOAD_MODES, MODES, SEMANTICS, DownloadHeader, UploadHeader
from vmservice.wire.openheaders.fields import BadHeader


#: The records of a copy's header.
_Header = TypeVar("_Header", UploadHeader, DownloadHeader)


def read_header(kind: type[_Header], header: Mapping[str, Any]) -> _Header:
    """
    The copy ``header`` asks for, as a ``kind`` (:class:`UploadHeader` or :class:`DownloadHeader`).

    :raises FsError: ``invalid``, naming the field.
    """
    try:
        return kind.from_json(header)
    except BadHeader as e:
        raise FsError("invalid", str(e)) from None


def home_path(path: str, uid: Optional[int]) -> str:
    """A header's checked ``path``, with ``~`` as ``uid``'s home directory."""
    return resolve_path(path, home=lambda: home_of(uid))


__all__ = ["DOWNLOAD_MODES", "MODES", "SEMANTICS", "home_path", "read_header"]
