# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
The fields of a copy's OPEN header, checked: each is the value or an ``invalid``
:class:`~vmservice.guest.filesystem.FsError`.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from vmservice.guest.copying.placement import home_of
from vmservice.guest.filesystem import FsError, resolve_path
from vmservice.wire.excludes import Excludes

#: Copy modes of an upload.
MODES = ("binary", "tar")
#: Copy modes of a download: ``recursive`` is ``binary`` for a file, ``tar`` for a directory.
DOWNLOAD_MODES = ("binary", "tar", "recursive")
#: Where a copy lands: ``legacy`` (``path`` is the file or the directory
#: itself) or ``cp-v1`` (the placement rules of ``cp``).
SEMANTICS = ("legacy", "cp-v1")


def id_field(header: Mapping[str, Any], name: str) -> Optional[int]:
    value = header.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32 - 1:
        raise FsError("invalid", f"{name} must be null or 0 .. 4294967294")
    return value


def mode_field(header: Mapping[str, Any], modes: tuple[str, ...] = MODES) -> str:
    mode = header.get("mode", "binary")
    if mode not in modes:
        raise FsError("invalid", f"invalid mode: {mode} ({', '.join(modes)})")
    return str(mode)


def semantics_field(header: Mapping[str, Any]) -> str:
    semantics = header.get("semantics") or "legacy"
    if semantics not in SEMANTICS:
        raise FsError("invalid", f"invalid copy semantics: {semantics} ({', '.join(SEMANTICS)})")
    return str(semantics)


def excludes_field(header: Mapping[str, Any]) -> Excludes:
    patterns = header.get("exclude") or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise FsError("invalid", "exclude must be a list of patterns")
    return Excludes(patterns)


def unpacked_size_field(header: Mapping[str, Any]) -> Optional[int]:
    value = header.get("unpacked_size")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FsError("invalid", "unpacked_size must be null or a byte count")
    return value


def path_field(header: Mapping[str, Any], uid: Optional[int]) -> str:
    """The header's ``path``, with ``~`` as ``uid``'s home directory."""
    return resolve_path(header.get("path"), home=lambda: home_of(uid))


__all__ = [
    "DOWNLOAD_MODES",
    "MODES",
    "SEMANTICS",
    "excludes_field",
    "id_field",
    "mode_field",
    "path_field",
    "semantics_field",
    "unpacked_size_field",
]
