# -*- test-case-name: tests.api.inputs.test_copies,tests.api.test_copying -*-
"""
How a copy is sent: the mode (query, ``Content-Type`` or ``Accept``), the
copy semantics, a cp-v1 upload's placement, and the unpacked size a tar
upload announces.
"""

from __future__ import annotations

import re

from twisted.web.iweb import IRequest

from ...errors import BadRequest


#: The media type of a tar stream.
TAR_MEDIA_TYPE = "application/x-tar"


def _media_types(request: IRequest, name: bytes) -> list[str]:
    """The media types of header ``name`` (``Content-Type`` or ``Accept``), lower case, without parameters."""
    found = []
    for raw in request.requestHeaders.getRawHeaders(name, []):
        value = raw.decode("latin-1") if isinstance(raw, bytes) else raw
        for part in value.split(","):
            media = part.split(";")[0].strip().lower()
            if media:
                found.append(media)
    return found


def cp_mode(request: IRequest, mode: str | None, header: bytes) -> str:
    """
    The legacy copy mode: the ``mode`` query parameter, else ``tar`` when the
    ``header`` (``Content-Type`` of an upload, ``Accept`` of a download) names
    only ``application/x-tar``, else ``binary``.
    """
    if mode:
        return mode
    media = _media_types(request, header)
    return "tar" if media and all(m == TAR_MEDIA_TYPE for m in media) else "binary"


#: The copy semantics that places a copy like ``cp``.
CP_V1 = "cp-v1"


#: What each cp-v1 mode is on the guest's side, for an upload and a download.
_CP_V1_MODES = {"cp-v1-binary": "binary", "cp-v1-tar": "tar", "cp-v1-recursive": "recursive"}


def cp_semantics(mode: str | None, copy_semantics: str | None) -> str:
    """``cp-v1`` for a ``cp-v1-*`` mode or ``copy_semantics=cp-v1``, else ``legacy``."""
    return CP_V1 if mode in _CP_V1_MODES or copy_semantics == CP_V1 else "legacy"


def cp_upload_mode(request: IRequest, mode: str | None, source_type: str | None) -> str:
    """
    How the guest reads an upload's body, ``binary`` or ``tar``: the legacy
    mode (see :func:`cp_mode`); ``cp-v1-binary`` or ``cp-v1-tar``;
    ``cp-v1-recursive`` by ``source_type`` (a file is binary, a directory a
    tar), else by ``Content-Type`` like a missing mode.
    """
    wire = _CP_V1_MODES.get(mode or "")
    if wire == "recursive":
        by_type = {"file": "binary", "directory": "tar"}.get(source_type or "")
        return by_type or cp_mode(request, None, b"content-type")
    return wire or cp_mode(request, mode, b"content-type")


def cp_download_mode(request: IRequest, mode: str | None) -> str:
    """What the guest sends: ``binary``, ``tar`` or ``recursive`` (a file's bytes or a directory's tar)."""
    return _CP_V1_MODES.get(mode or "") or cp_mode(request, mode, b"accept")


def cp_source(
    semantics: str, wire_mode: str, source_name: str | None, source_type: str | None, copy_contents: bool
) -> tuple[str | None, bool]:
    """
    The ``(source_name, copy_contents)`` a cp-v1 upload is placed by, checked
    against each other and the mode; ``(None, False)`` for a legacy upload,
    whose placement they do not change.

    :raise BadRequest: ``source_type`` does not match the mode,
        ``copy_contents`` for a file, a ``source_name`` that is not a base
        name, or none where it is needed (unless ``copy_contents``).
    """
    if semantics != CP_V1:
        return None, False
    expected = "file" if wire_mode == "binary" else "directory"
    if source_type is not None and source_type != expected:
        raise BadRequest(f"source_type={source_type} does not match a {wire_mode} upload (a file is sent binary, "
                         "a directory as a tar)", code="invalid_query")
    if copy_contents and wire_mode == "binary":
        raise BadRequest("copy_contents applies to a directory (a tar upload), not to a file", code="invalid_query")
    name = source_name or None
    if name is not None and ("/" in name or name in (".", "..")):
        raise BadRequest(f"query parameter 'source_name' must be a base name (no '/', not . or ..), not {name!r}",
                         code="invalid_query")
    if name is None and not copy_contents:
        raise BadRequest("query parameter 'source_name' is required with cp-v1 semantics (unless copy_contents=true)",
                         code="invalid_query")
    return name, copy_contents


#: The header in which a tar upload announces the bytes of its regular files.
UNPACKED_SIZE_HEADER = b"X-Slicer-Unpacked-Size"


def unpacked_size(request: IRequest) -> int | None:
    """
    ``X-Slicer-Unpacked-Size``: a count of bytes in decimal digits (the last
    one when repeated), or ``None`` when absent.

    :raise BadRequest: ``invalid_header`` for anything else.
    """
    values = request.requestHeaders.getRawHeaders(UNPACKED_SIZE_HEADER)
    if not values:
        return None
    raw = values[-1]
    text = (raw.decode("latin-1") if isinstance(raw, bytes) else raw).strip(" \t")
    if not re.fullmatch(r"[0-9]{1,20}", text):
        raise BadRequest(f"header X-Slicer-Unpacked-Size must be a byte count (decimal digits), not {text[:40]!r}",
                         code="invalid_header")
    return int(text)
