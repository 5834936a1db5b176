# -*- test-case-name: tests.wire.test_openheaders -*-
"""
The OPEN headers of copies: into the guest (``{"op": "cp-upload", ...}``,
:class:`UploadHeader`) and out of it (``{"op": "cp-download", ...}``,
:class:`DownloadHeader`), written by the host and read by the guest
(documented in ``docs/agent-protocol.md``); the optional fields are sent only
when they say something.  A copy over the bulk port adds its token to the
JSON (``bulk``), which is not part of these records.  Stdlib only: the guest
imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from vmservice.wire.openheaders.fields import BadHeader, header_object, is_int

#: Copy modes of an upload.
MODES = ("binary", "tar")
#: Copy modes of a download: ``recursive`` is ``binary`` for a file, ``tar`` for a directory.
DOWNLOAD_MODES = ("binary", "tar", "recursive")
#: Where a copy lands: ``legacy`` (``path`` is the file or the directory
#: itself) or ``cp-v1`` (the placement rules of ``cp``).
SEMANTICS = ("legacy", "cp-v1")


def checked_path(value: object) -> str:
    """
    A header's ``path``: absolute, or ``~``/``~/...`` (a home directory, expanded by the guest).

    :raises BadHeader: anything else (relative, ``~user``, empty, NUL).
    """
    if not isinstance(value, str) or not value:
        raise BadHeader("path is required")
    if "\x00" in value:
        raise BadHeader("path must not contain NUL")
    if not (value == "~" or value.startswith(("~/", "/"))):
        raise BadHeader(f"path must be absolute: {value!r}")
    return value


def _mode(header: Mapping[str, Any], modes: tuple[str, ...]) -> str:
    mode = header.get("mode", "binary")
    if mode not in modes:
        raise BadHeader(f"invalid mode: {mode} ({', '.join(modes)})")
    return str(mode)


def _semantics(header: Mapping[str, Any]) -> str:
    semantics = header.get("semantics") or "legacy"
    if semantics not in SEMANTICS:
        raise BadHeader(f"invalid copy semantics: {semantics} ({', '.join(SEMANTICS)})")
    return str(semantics)


def _id(header: Mapping[str, Any], name: str) -> Optional[int]:
    value = header.get(name)
    if value is not None and (not is_int(value) or not 0 <= value < 2**32 - 1):
        raise BadHeader(f"{name} must be null or 0 .. 4294967294")
    return value


def _excludes(header: Mapping[str, Any]) -> tuple[str, ...]:
    patterns = header.get("exclude") or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise BadHeader("exclude must be a list of patterns")
    return tuple(patterns)


def checked_source_name(value: object) -> Optional[str]:
    """
    A cp-v1 ``source_name``: ``None`` when absent or empty, else a base name.

    :raises BadHeader: a name with ``/`` or NUL, ``.`` or ``..``.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str) or "/" in value or "\x00" in value or value in (".", ".."):
        raise BadHeader(f"source_name must be a base name (no '/', not . or ..), not {value!r}")
    return value


def _said(header: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``header`` with those of the ``optional`` fields that say something (are not ``None``), in order."""
    header.update((name, value) for name, value in optional.items() if value is not None)
    return header


@dataclass(frozen=True)
class UploadHeader:
    """
    One copy into the guest.

    :ivar path: the guest path (absolute or ``~``/``~/...``; ``~`` is the
        home directory of ``uid``, root's when it is ``None``).
    :ivar mode: ``binary`` (the body is the file) or ``tar``.
    :ivar uid: owner, ``None`` for the default (the replaced file's, else root).
    :ivar gid: group, ``None`` for the default.
    :ivar permissions: the file's mode (binary) or the directory's (tar), or ``None``.
    :ivar semantics: ``legacy`` (``path`` is the file or directory itself) or
        ``cp-v1`` (placed like ``cp`` would, see ``docs/api.md``).
    :ivar source_name: cp-v1: the base name of what was copied.
    :ivar copy_contents: cp-v1: the directory's contents go into ``path``.
    :ivar exclude: patterns of tar entries left out.
    :ivar unpacked_size: bytes the upload unpacks to, checked against the
        guest's free space before anything is written.
    """

    path: str
    mode: str = "binary"
    uid: Optional[int] = None
    gid: Optional[int] = None
    permissions: Optional[int] = None
    semantics: str = "legacy"
    source_name: Optional[str] = None
    copy_contents: bool = False
    exclude: tuple[str, ...] = ()
    unpacked_size: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object; the cp-v1 fields, ``exclude`` and ``unpacked_size`` when they say something."""
        header: dict[str, Any] = {"op": "cp-upload", "path": self.path, "mode": self.mode, "uid": self.uid,
                                  "gid": self.gid, "permissions": self.permissions}
        if self.semantics != "legacy":
            header.update(semantics=self.semantics, source_name=self.source_name, copy_contents=self.copy_contents)
        return _said(header, exclude=list(self.exclude) or None, unpacked_size=self.unpacked_size)

    @classmethod
    def from_json(cls, value: object) -> UploadHeader:
        """
        Read and check a header (its ``op`` is not looked at); ``source_name``
        and ``copy_contents`` are read for cp-v1 only.

        :raises BadHeader: naming the field.
        """
        header = header_object(value)
        mode, semantics = _mode(header, MODES), _semantics(header)
        uid, gid = _id(header, "uid"), _id(header, "gid")
        path = checked_path(header.get("path"))
        permissions = header.get("permissions")
        if permissions is not None and (not is_int(permissions) or not 0 <= permissions <= 0o7777):
            raise BadHeader("permissions must be null or 0 .. 0o7777")
        exclude = _excludes(header)
        unpacked = header.get("unpacked_size")
        if unpacked is not None and (not is_int(unpacked) or unpacked < 0):
            raise BadHeader("unpacked_size must be null or a byte count")
        cp_v1 = semantics == "cp-v1"
        return cls(path, mode, uid, gid, permissions, semantics, checked_source_name(header.get("source_name")) if cp_v1
                   else None, cp_v1 and header.get("copy_contents") is True, exclude, unpacked)


@dataclass(frozen=True)
class DownloadHeader:
    """
    One copy out of the guest.

    :ivar path: the guest path.
    :ivar mode: ``binary`` (a file's bytes), ``tar``, or ``recursive``
        (``binary`` for a file, ``tar`` for a directory).
    :ivar semantics: ``legacy`` or ``cp-v1`` (``tar`` is then for directories only).
    :ivar exclude: patterns of entries left out of a tar.
    :ivar uid: whose home directory ``~`` is (root's when ``None``).
    """

    path: str
    mode: str = "binary"
    semantics: str = "legacy"
    exclude: tuple[str, ...] = ()
    uid: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object; ``semantics``, ``exclude`` and ``uid`` when they say something."""
        return _said({"op": "cp-download", "path": self.path, "mode": self.mode},
                     semantics=None if self.semantics == "legacy" else self.semantics,
                     exclude=list(self.exclude) or None, uid=self.uid)

    @classmethod
    def from_json(cls, value: object) -> DownloadHeader:
        """
        Read and check a header (its ``op`` is not looked at).

        :raises BadHeader: naming the field.
        """
        header = header_object(value)
        mode, semantics = _mode(header, DOWNLOAD_MODES), _semantics(header)
        uid = _id(header, "uid")
        return cls(checked_path(header.get("path")), mode, semantics, _excludes(header), uid)


__all__ = ["DOWNLOAD_MODES", "DownloadHeader", "MODES", "SEMANTICS", "UploadHeader", "checked_path", "checked_source_name"]
