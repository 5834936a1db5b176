# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
What a copy fails with: the ``error`` kinds of its replies, the worker's own
exceptions, and the reply of an :class:`~vmservice.guest.filesystem.FsError`.
"""

from __future__ import annotations

import errno
from typing import Any

from vmservice.guest.filesystem import ERROR_KINDS as FS_ERROR_KINDS
from vmservice.guest.filesystem import FsError, error_from_os

#: Every ``error`` kind a reply may carry: the fs kinds and the copy's own.
ERROR_KINDS = FS_ERROR_KINDS + (
    "is_a_directory",
    "unsafe_entry",
    "unsupported_entry",
    "bad_archive",
    "missing_destination",
    "no_space",
)


class Cancelled(Exception):
    """The stream was reset: the worker stops and cleans up."""


class CopyFailed(Exception):
    """A failure after a download's head: the stream is reset."""


def error_reply(error: FsError) -> dict[str, Any]:
    """The ``{"ok": false, ...}`` object for ``error``."""
    return {"ok": False, "error": error.kind, "message": error.message}


def os_error(error: OSError, path: str) -> FsError:
    """
    The :class:`FsError` of an ``OSError`` met by a copy: a full file system
    (``ENOSPC``, ``EDQUOT``) is ``no_space``, the rest as the fs operations say.
    """
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return FsError("no_space", f"{path}: {error.strerror or 'no space left on device'}")
    return error_from_os(error, path)


__all__ = ["ERROR_KINDS", "Cancelled", "CopyFailed", "error_reply", "os_error"]
