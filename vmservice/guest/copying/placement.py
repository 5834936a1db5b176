# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
Where a copy lands: ``~`` as a user's home directory, and the rules of ``cp``
for a cp-v1 upload of a file or a directory named ``source_name``.
"""

from __future__ import annotations

import os
import stat
from typing import Optional

from vmservice.guest.filesystem import FsError, error_from_os, root_home
from vmservice.wire.openheaders.copy import checked_source_name
from vmservice.wire.openheaders.fields import BadHeader


def home_of(uid: Optional[int]) -> str:
    """
    The home directory ``~`` names for ``uid``: the user's from
    ``/etc/passwd``; root's when ``uid`` is ``None`` or 0, or has no entry
    there (as ``~`` always was: clients send their own local uid, which the
    guest often does not know).
    """
    if not uid:
        return root_home()
    from vmservice.guest.exec_spec import passwd_entry

    entry = passwd_entry(uid)
    if entry is None or not entry[1].startswith("/"):
        return root_home()
    return entry[1]


def source_name(value: object) -> Optional[str]:
    """
    A cp-v1 ``source_name``: ``None`` when absent or empty, else a base name
    (:func:`~vmservice.wire.openheaders.copy.checked_source_name`).

    :raises FsError: ``invalid`` for a name with ``/`` or NUL, ``.`` or ``..``.
    """
    try:
        return checked_source_name(value)
    except BadHeader as e:
        raise FsError("invalid", str(e)) from None


def _named(path: str, name: Optional[str]) -> str:
    """``path/name``: where a source named ``name`` lands in the existing directory ``path``."""
    if name is None:
        raise FsError("invalid", f"{path} is a directory: source_name is needed to place the copy in it")
    return os.path.join(path, name)


def _strip_directory_suffix(path: str) -> str:
    """``path`` without trailing ``/`` and ``/.`` (``/`` stays ``/``)."""
    while len(path) > 1 and (path.endswith("/") or path.endswith("/.")):
        path = path[:-1] if path.endswith("/") else path[:-2]
    return path or "/"


def file_target(path: str, name: Optional[str]) -> str:
    """
    Where a cp-v1 upload of a file named ``name`` to ``path`` writes (the
    rules of ``cp``, symlinks at ``path`` followed):

    - ``path`` is an existing directory: ``path/name`` (which must not be a directory);
    - ``path`` is an existing file: ``path`` itself (replaced);
    - ``path`` does not exist and ends in ``/``: ``missing_destination``;
    - otherwise ``path`` (missing parents are made).

    :raises FsError: ``missing_destination``, ``is_a_directory``, ``invalid``
        (no ``name`` where one is needed), or what looking at ``path`` met.
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        if path.endswith("/"):
            raise FsError("missing_destination", f"{path}: no such directory (a path ending in / must exist)") from None
        return path
    except OSError as e:
        raise error_from_os(e, path) from None
    if not stat.S_ISDIR(status.st_mode):
        return path
    target = _named(_strip_directory_suffix(path), name)
    if os.path.isdir(target):
        raise FsError("is_a_directory", f"{target}: is a directory, which a file cannot replace")
    return target


def directory_target(path: str, name: Optional[str], copy_contents: bool) -> tuple[str, bool]:
    """
    Where a cp-v1 upload of a directory named ``name`` to ``path`` lands, and
    whether that directory exists already (the upload is then merged into it):

    - ``path`` exists and is not a directory: ``not_a_directory``;
    - ``path`` is a directory and ``copy_contents``: ``path`` (merged);
    - ``path`` is a directory: ``path/name`` (merged when it is a directory
      already, ``not_a_directory`` when it is something else);
    - ``path`` does not exist: ``path`` (created).

    :raises FsError: as above, ``invalid`` when ``name`` is needed and absent.
    """
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return _strip_directory_suffix(path), False
    except OSError as e:
        raise error_from_os(e, path) from None
    if not stat.S_ISDIR(status.st_mode):
        raise FsError("not_a_directory", f"{path}: exists and is not a directory")
    path = _strip_directory_suffix(path)
    if copy_contents:
        return path, True
    target = _named(path, name)
    try:
        status = os.stat(target)
    except FileNotFoundError:
        return target, False
    except OSError as e:
        raise error_from_os(e, target) from None
    if not stat.S_ISDIR(status.st_mode):
        raise FsError("not_a_directory", f"{target}: exists and is not a directory")
    return target, True


__all__ = ["directory_target", "file_target", "home_of", "source_name"]
