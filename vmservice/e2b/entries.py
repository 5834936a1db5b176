# -*- test-case-name: tests.e2b.test_filesystem -*-
"""
The filesystem service's words: the paths a call names, resolved as envd
resolves them, and a guest's entries rendered as envd's ``EntryInfo``.

A path is absolute, or ``~``/``~/...``, or relative: the last two are under
the calling user's home directory (envd's ``permissions.ExpandAndResolve``;
``~other`` is refused).  An entry is rendered in protobuf JSON: ``type`` an
enum name (a symlink has its target's type, and ``isSymlink``), ``size`` an
int64 as text, ``permissions`` as Go's ``FileMode.String`` writes them
(``-rw-r--r--``, ``drwxr-xr-x``, ``Lrwxrwxrwx``), ``modifiedTime`` RFC 3339,
``metadata`` the entry's ``user.e2b.*`` attributes; fields at their default
left out.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ..api.filesystem import rfc3339_ns
from ..guestport.files import FsEntry
from .connect import Code, ConnectError
from .users import EnvdUser

#: The longest path a call may name, in characters (``PATH_MAX``).
MAX_PATH = 4096

#: envd's file types, by the guest's entry types (the rest are unspecified).
FILE_TYPES = {"file": "FILE_TYPE_FILE", "directory": "FILE_TYPE_DIRECTORY", "symlink": "FILE_TYPE_SYMLINK"}

#: Go's ``FileMode.String`` type letters, by the guest's entry types.
_TYPE_LETTERS = {"directory": "d", "symlink": "L", "block_device": "D", "char_device": "Dc", "fifo": "p",
                 "socket": "S", "other": "?"}


def resolve(path: str, user: EnvdUser) -> str:
    """
    The absolute, normalized path ``path`` names for ``user``.

    :raise ConnectError: ``invalid_argument`` for ``~other``, NUL, or a path over :data:`MAX_PATH`.
    """
    if "\0" in path or len(path) > MAX_PATH:
        raise ConnectError(Code.INVALID_ARGUMENT, "the path is not a path")
    if path.startswith("~"):
        if len(path) > 1 and path[1] != "/":
            raise ConnectError(Code.INVALID_ARGUMENT, f"cannot expand user-specific home dir: {path[:200]}")
        path = user.home + path[1:]
    if not path.startswith("/"):
        path = posixpath.join(user.home, path)
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/")


def permissions(entry_type: str, mode: int) -> str:
    """``mode`` of an entry of ``entry_type`` as Go's ``FileMode.String`` writes it."""
    letters = _TYPE_LETTERS.get(entry_type, "")
    letters += "u" if mode & 0o4000 else ""
    letters += "g" if mode & 0o2000 else ""
    letters += "t" if mode & 0o1000 else ""
    bits = "".join(char if mode & (1 << (8 - index)) else "-" for index, char in enumerate("rwxrwxrwx"))
    return (letters or "-") + bits


def entry_info(entry: FsEntry, path: str) -> dict[str, Any]:
    """The ``EntryInfo`` of ``entry`` found at ``path``."""
    details = entry.details
    link = entry.type == "symlink"
    shown_type = details.target_type if link and details is not None else entry.type
    mode = (details.target_mode or 0) if link and details is not None else entry.mode
    info: dict[str, Any] = {"name": posixpath.basename(path) or "/", "path": path,
                            "permissions": permissions(entry.type, entry.mode & 0o777 if link else entry.mode),
                            "modifiedTime": rfc3339_ns(entry.mtime_ns)}
    file_type = FILE_TYPES.get(shown_type or "")
    if file_type is not None:
        info["type"] = file_type
    if entry.size:
        info["size"] = str(entry.size)
    if mode & 0o777:
        info["mode"] = mode & 0o777
    if details is not None:
        info.update(owner=details.owner, group=details.group)
        if details.symlink_target is not None:
            info["symlinkTarget"] = details.symlink_target
        if details.metadata:
            info["metadata"] = dict(details.metadata)
    if link:
        info["isSymlink"] = True
    return info


__all__ = ["FILE_TYPES", "MAX_PATH", "entry_info", "permissions", "resolve"]
