# -*- test-case-name: tests.api.test_copying -*-
"""
``/vm/{hostname}/cp``: file copy between the caller and a guest, streamed both ways.

- ``POST`` uploads: the request body is streamed (the route's
  ``stream_body``; see :mod:`vmservice.api.streaming`) into the guest's
  upload with flow control, and the guest's answer becomes a 200
  :class:`~.models.CopyResult` (or the error it maps to).
- ``GET`` downloads: the guest's head becomes the status and the headers
  (``X-Service-File-Mode`` and, for existing clients, ``X-Slicer-File-Mode``,
  ``X-Slicer-Source-Type``, ``X-Slicer-Source-Name-Base64``, the last left
  out for ``/``, which has no name); the content is then written as it
  arrives, as a tar or as a file's bytes (``cp-v1-recursive`` answers each
  the way its source is).  The download is the response's push producer,
  so a client that reads slowly withholds the guest's credit.  A failure after
  the headers aborts the connection, so the client sees a truncated body
  rather than a complete-looking one.  What the guest says is untrusted: the
  head's values reach the headers only as the agent code made them safe
  (:class:`~vmservice.guestport.files.DownloadHead`; a name that is no
  file's name is left out like the root's), and a file whose content is not
  the size its head gave (the ``Content-Length``) fails the download
  after the headers: cut at that size and the connection aborted.

Both speak the legacy modes (``binary``, ``tar``: ``path`` is the file or
the directory itself) and the ``cp-v1-*`` modes, which place an upload the
way ``cp`` would (into an existing directory under ``source_name``, merged
with ``copy_contents``); the rules are in ``docs/api.md``.
"""

from __future__ import annotations

import base64
from typing import Optional

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.server import Request

from ..errors import AgentError, GuestErrorKind
from ..guestport.files import DownloadRequest, IUpload, UploadRequest
from ..nodes.fleet import Fleet
from .inputs.copies import cp_download_mode, cp_semantics, cp_source, cp_upload_mode, unpacked_size
from .models.files import CopyResult
from .models.meta import ErrorResponse
from .query import COPY_SEMANTICS, CP_MODE, FILE_MODE, GUEST_PATH, SOURCE_TYPE, Boolean, Text, UserId, param
from .rendering import format_mode, json_body
from .request_body import RequestBody
from .routing import Reply, Route
from .streaming import drop_connection, request_body

log = Logger()

_PATH = ("Guest path (absolute, ~ or ~/...): legacy modes: the file (binary) or directory (tar); "
         "cp-v1 modes: the destination as cp reads it")
_MODE = ("binary (default) or tar; cp-v1-binary, cp-v1-tar or cp-v1-recursive (cp placement); "
         "absent: from Content-Type / Accept")
_SEMANTICS = "cp-v1: place the copy like cp (implied by the cp-v1-* modes)"
_EXCLUDE = "Pattern of tar entries left out, relative to the copied directory (repeat for more)"


@frozen
class UploadQuery:
    """Where and how an upload is written."""

    path: str = param(GUEST_PATH, _PATH, required=True)
    mode: Optional[str] = param(CP_MODE, _MODE)
    uid: Optional[int] = param(UserId(), "Owner, and whose ~ (default: the replaced file's, else root; "
                                         "4294967295 = not set)")
    gid: Optional[int] = param(UserId(), "Group (default like uid)")
    permissions: Optional[int] = param(FILE_MODE, "Octal mode of the file (binary) or of the directory (tar), e.g. 0644")
    copy_semantics: Optional[str] = param(COPY_SEMANTICS, _SEMANTICS)
    source_name: Optional[str] = param(Text(), "cp-v1: base name of the copied file or directory "
                                               "(required unless copy_contents)")
    source_type: Optional[str] = param(SOURCE_TYPE, "cp-v1: file or directory (must match the mode)")
    copy_contents: bool = param(Boolean(), "cp-v1: the source was dir/. : its contents go into (or merge with) path",
                                default=False)
    exclude: tuple[str, ...] = param(Text(), _EXCLUDE, repeated=True)

    def upload(self, request: IRequest) -> UploadRequest:
        """The guest's upload; the mode comes from ``Content-Type`` when not given."""
        mode = cp_upload_mode(request, self.mode, self.source_type)
        semantics = cp_semantics(self.mode, self.copy_semantics)
        name, contents = cp_source(semantics, mode, self.source_name, self.source_type, self.copy_contents)
        return UploadRequest(path=self.path, mode=mode, uid=self.uid, gid=self.gid, permissions=self.permissions,
                             semantics=semantics, source_name=name, copy_contents=contents, exclude=self.exclude,
                             unpacked_size=unpacked_size(request))


@frozen
class DownloadQuery:
    """What a download reads."""

    path: str = param(GUEST_PATH, _PATH, required=True)
    mode: Optional[str] = param(CP_MODE, _MODE)
    copy_semantics: Optional[str] = param(COPY_SEMANTICS, _SEMANTICS)
    exclude: tuple[str, ...] = param(Text(), _EXCLUDE, repeated=True)
    uid: Optional[int] = param(UserId(), "Whose home directory ~ is (default: root's)")

    def download(self, request: IRequest) -> DownloadRequest:
        """The guest's download; the mode comes from ``Accept`` when not given."""
        return DownloadRequest(path=self.path, mode=cp_download_mode(request, self.mode),
                               semantics=cp_semantics(self.mode, self.copy_semantics), exclude=self.exclude,
                               uid=self.uid)


def name_header(name: str) -> bytes:
    """``X-Slicer-Source-Name-Base64``: the name as base64url without padding."""
    return base64.urlsafe_b64encode(name.encode("utf-8", "surrogateescape")).rstrip(b"=")


def _errors(upload: bool) -> dict[int, Reply]:
    replies = {
        400: Reply("Bad input: missing or relative path, bad mode (invalid mode: <m>), uid, gid, permissions, "
                   "cp-v1 parameters or X-Slicer-Unpacked-Size; a directory in binary mode (must specify a file not "
                   "a directory), a file in cp-v1-tar mode; a destination that cp would refuse; an unsafe or "
                   "malformed tar", ErrorResponse),
        404: Reply("No such VM, or (download) no such path in the guest", ErrorResponse),
        409: Reply("The VM is paused, stopped or suspended; (upload) a tar entry against a directory of the "
                   "other kind", ErrorResponse),
        503: Reply("The VM's agent is not connected", ErrorResponse),
    }
    if upload:
        replies[507] = Reply("insufficient_storage: no room in the guest's file system: refused before writing "
                             "when X-Slicer-Unpacked-Size does not fit, or ran out while writing (nothing is left); "
                             "state_dir_full: the VM stopped because its disk could not grow in the daemon's full "
                             "state directory (the copy was cut off)", ErrorResponse)
    return replies


def _abort_response(request: Request) -> Deferred[None]:
    """
    Drop the connection of a response whose headers are out: the client must
    see the body as truncated.  Fires (or fails) once the connection is gone.
    """
    finished: Deferred[None] = request.notifyFinish()
    drop_connection(request)
    return finished


class CopyApi:
    """:param fleet: the nodes of this daemon."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        return [
            Route(
                "POST", "/vm/{hostname}/cp", self.upload, "Copy a file or a tar stream into the node", "cp",
                {200: Reply("Written (a file replaced atomically; a tar extracted)", CopyResult), **_errors(True)},
                query=UploadQuery,
                stream_body=True,
                stream="cp",
            ),
            Route(
                "GET", "/vm/{hostname}/cp", self.download, "Copy a file or a tar of a directory out of the node", "cp",
                {200: Reply("The file's bytes, or a tar of the file or the directory's contents",
                            media="application/octet-stream"), **_errors(False)},
                query=DownloadQuery,
                stream="cp",
            ),
        ]

    async def upload(self, request: IRequest, query: UploadQuery, hostname: str) -> bytes:
        body = request_body(request)
        try:
            wanted = query.upload(request)
            upload = (await self._fleet.guest(hostname)).upload(wanted)
        except BaseException:
            body.stopProducing()
            raise
        sending = self._send_body(body, upload)
        try:
            result = await upload.result
        except BaseException:
            upload.abort()
            body.stopProducing()
            raise
        finally:
            if not sending.called:
                sending.cancel()
        return json_body(request, CopyResult(path=result.path, mode=wanted.mode, size=result.size, entries=result.entries))

    def _send_body(self, body: RequestBody, upload: IUpload) -> Deferred[None]:
        """Stream ``body`` into the upload with back-pressure; end it with the body, abort it on a lost client."""
        upload.register_producer(body)
        delivered = body.deliver_to(upload.write)

        def ended(length: int) -> None:
            upload.unregister_producer()
            upload.end()

        def lost(failure: Failure) -> None:
            upload.abort()

        return delivered.addCallbacks(ended, lost)

    async def download(self, request: Request, query: DownloadQuery, hostname: str) -> bytes:
        wanted = query.download(request)
        download = (await self._fleet.guest(hostname)).download(wanted)
        try:
            head = await download.head
        except BaseException:
            download.abort()
            raise
        mode = format_mode(head.mode).encode("ascii")
        request.setResponseCode(200)
        tar = wanted.mode == "tar" or (wanted.mode == "recursive" and head.type == "directory")
        request.setHeader(b"Content-Type", b"application/x-tar" if tar else b"application/octet-stream")
        request.setHeader(b"X-Service-File-Mode", mode)
        request.setHeader(b"X-Slicer-File-Mode", mode)
        request.setHeader(b"X-Slicer-Source-Type", head.type.encode("ascii"))
        if head.name not in ("", "/"):
            request.setHeader(b"X-Slicer-Source-Name-Base64", name_header(head.name))
        request.setHeader(b"Cache-Control", b"no-store")
        if not tar and head.size is not None:
            request.setHeader(b"Content-Length", str(head.size).encode("ascii"))
        request.registerProducer(download, True)
        download.deliver_to(request.write)
        try:
            await download.done
        except AgentError as error:
            if error.kind is not GuestErrorKind.INTERRUPTED:
                raise
            log.warn("download of {path} from {hostname} interrupted: {error}", path=wanted.path,
                     hostname=hostname, error=str(error))
            request.unregisterProducer()
            try:
                await _abort_response(request)
            except Exception:
                pass
            return b""
        except CancelledError:
            download.abort()
            raise
        request.unregisterProducer()
        return b""


__all__ = ["CopyApi", "DownloadQuery", "UploadQuery", "name_header"]
