# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
File copy in the guest: ``{"op": "cp-upload"}`` and ``{"op": "cp-download"}`` streams.

**Upload** (host to guest).  OPEN header
``{"op": "cp-upload", "path": P, "mode": "binary"|"tar", "uid": N|null,
"gid": N|null, "permissions": N|null}``, optionally with ``"semantics":
"legacy"|"cp-v1"`` (absent: legacy), ``"source_name": NAME|null``,
``"copy_contents": bool``, ``"exclude": [PATTERN, ...]`` and
``"unpacked_size": N|null``.  ``~`` in ``P`` is the home directory of
``uid`` (from ``/etc/passwd``; root's when ``uid`` is null or unknown).  The host's DATA
is the body (the file, or an uncompressed tar stream) and its HALF_CLOSE ends
it.  The agent answers one JSON object and half-closes: ``{"ok": true,
"result": {"path", "size", "entries"}}`` or ``{"ok": false, "error": KIND,
"message": TEXT}`` (KIND from :data:`ERROR_KINDS`).  An error may come before
the body ended (an unsafe tar entry, no room): the agent then acknowledges
and drops the rest, and the host resets the stream.  Nothing is committed
unless the body ended with HALF_CLOSE: a reset removes the file being written.

``unpacked_size`` (the client's ``X-Slicer-Unpacked-Size``) is checked
before anything is written: the target's file system must have
:func:`space_needed` bytes free, else ``no_space`` (see :func:`check_space`).
A file system that fills up during the copy is ``no_space`` too.

- ``binary``: ``P`` is the file.  It is written beside its final name
  (``.NAME.vmservice-XXXX``), fsynced and renamed over ``P``, so readers see
  the old file or the new one, never a part.  Missing parent directories are
  made with mode 0755 (owned by ``uid``/``gid`` when given).  ``permissions``
  (default: the replaced file's mode, else 0644) and ``uid``/``gid`` (default:
  the replaced file's owner, else the agent's, root) are set on the new file.
  A directory at ``P`` is refused (``is_a_directory``); a symlink at ``P`` is
  replaced, not followed.
- ``tar``: ``P`` is a directory (made like the parents above when missing)
  and every entry is extracted below it, in place.  Regular files,
  directories, symlinks and hard links are accepted; each file is written
  beside and renamed like a binary upload (one ``sync`` at the end instead of
  an fsync per file).  Modes and mtimes come from the archive; owners are
  ``uid``/``gid`` (default root), never the archive's.  ``permissions`` sets
  ``P``'s mode.  Entries that ``exclude`` names (:mod:`vmservice.wire.excludes`) are
  skipped.  The upload stops with ``unsafe_entry`` at the first entry whose
  name is absolute or climbs out with ``..``, whose link target is absolute
  outside ``P`` or climbs out, that would be written through a symlink, or
  that is a device or FIFO (``unsupported_entry``).  Entries before it stay;
  nothing is ever written outside ``P``.

With ``"semantics": "cp-v1"`` the upload lands where ``cp`` would put a
source named ``source_name`` (:func:`file_target`, :func:`directory_target`),
and nothing is left behind by a failure: a file as above (and the parents made
for it are removed again); a directory is extracted into a hidden staging
directory and moved into place only once the whole archive is in (see
:func:`upload_tar_v1`).

**Download** (guest to host).  OPEN header ``{"op": "cp-download", "path": P,
"mode": "binary"|"tar"|"recursive"}``, optionally with ``"semantics"``,
``"exclude"`` and ``"uid"`` (for ``~``); the host half-closes at once.  The
agent sends a *head*, ``length u32 (big-endian) | JSON``, either ``{"ok":
true, "result": {"type": "file"|"directory", "name", "mode", "size"}}``
(``size`` is the byte count that follows for a non-empty binary file, else
``null``) or an error object as above, then the content, then HALF_CLOSE.  A
failure after the head resets the stream with ``INTERNAL_ERROR``.

- ``binary``: the bytes of the regular file ``P`` (symlinks followed).  A
  directory is ``is_a_directory`` with the words clients look for: *must
  specify a file not a directory*.
- ``tar``: a PAX tar of a file (one entry, its base name) or of a directory's
  contents (entries relative to it, no top-level entry, sorted, symlinks kept
  as links, sockets and excluded entries left out).  With cp-v1 semantics a
  file is ``not_a_directory``.
- ``recursive``: ``binary`` for a file, ``tar`` for a directory.

The file work runs on a thread per stream (disk I/O and ``fsync`` would stall
every stream under TCG) joined to the agent's loop by a :class:`~vmservice.guest.copying.bridge.Bridge`:
credit is given back to the host only once the thread took the bytes, and the
thread blocks while its output waits for the host's credit, so both directions
keep the agent's memory flat and a slow host slows the guest's reads.

**Over the bulk port** (:mod:`vmservice.guest.bulkport`): a ``cp-download`` header with
``"bulk": TOKEN`` has a non-empty regular file sent on the ``bulk`` port
(the head says ``"bulk": true``), and ``{"op": "cp-upload-bulk", ...,
"bulk": TOKEN}`` (:class:`BulkUploadHandler`) takes a binary upload's body
from it, its size from the stream; the port is one copy's at a time, and a
copy that cannot have it uses the stream (``docs/agent-protocol.md``, "The
bulk port").

Standard library only; :mod:`tarfile` is imported on first use of a tar.

The package offers the names below; its modules hold, by topic:

- :mod:`~vmservice.guest.copying.streams`: the operations' streams (the
  agent's ``cp-upload``, ``cp-download`` and ``cp-upload-bulk``);
- :mod:`~vmservice.guest.copying.fields`: the OPEN header's fields, checked;
- :mod:`~vmservice.guest.copying.bridge`: the loop and the worker joined;
- :mod:`~vmservice.guest.copying.binary_upload`, :mod:`~vmservice.guest.copying.tar_upload`
  (with :mod:`~vmservice.guest.copying.extraction`, a tar's entries checked
  and extracted) and :mod:`~vmservice.guest.copying.downloading`: the copies;
- :mod:`~vmservice.guest.copying.placement`: where a copy lands (``~``, cp-v1);
- :mod:`~vmservice.guest.copying.writing`: files and directories written
  and removed, the free space checked;
- :mod:`~vmservice.guest.copying.errors`: the error kinds and exceptions.
"""

from __future__ import annotations

from vmservice.guest.copying.binary_upload import upload_file, upload_file_v1
from vmservice.guest.copying.bridge import BRIDGE_HIGH_WATER
from vmservice.guest.copying.downloading import download, walk
from vmservice.guest.copying.errors import ERROR_KINDS, CopyFailed, error_reply, os_error
from vmservice.guest.copying.extraction import link_target_inside, member_path
from vmservice.guest.copying.fields import DOWNLOAD_MODES, MODES, SEMANTICS
from vmservice.guest.copying.placement import directory_target, file_target, home_of, source_name
from vmservice.guest.copying.streams import BulkUploadHandler, DownloadHandler, UploadHandler
from vmservice.guest.copying.tar_upload import merge_moves, move, move_across, upload_tar, upload_tar_v1
from vmservice.guest.copying.writing import (CHUNK, SPACE_MARGIN, SPACE_SHARE, check_space, make_directories,
                                             remove_made, remove_tree, space_needed, write_atomically)

__all__ = [
    "CHUNK",
    "DOWNLOAD_MODES",
    "ERROR_KINDS",
    "MODES",
    "SEMANTICS",
    "SPACE_MARGIN",
    "SPACE_SHARE",
    "BRIDGE_HIGH_WATER",
    "BulkUploadHandler",
    "CopyFailed",
    "DownloadHandler",
    "UploadHandler",
    "check_space",
    "directory_target",
    "download",
    "error_reply",
    "file_target",
    "home_of",
    "link_target_inside",
    "make_directories",
    "member_path",
    "merge_moves",
    "move",
    "move_across",
    "os_error",
    "remove_made",
    "remove_tree",
    "source_name",
    "space_needed",
    "upload_file",
    "upload_file_v1",
    "upload_tar",
    "upload_tar_v1",
    "walk",
    "write_atomically",
]
