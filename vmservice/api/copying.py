# -*- test-case-name: tests.api.test_copying -*-
"""
``/vm/{hostname}/cp``: file copy between the caller and a guest, streamed both ways.

- ``POST`` uploads: the request body is streamed (see
  :mod:`vmservice.api.streaming`; :func:`streams_cp_body` selects these
  requests at header time) into a ``cp-upload`` agent stream with flow
  control, and the guest's reply becomes a 200 :class:`~.models.CopyResult`
  (or the error it maps to).
- ``GET`` downloads: the guest's head becomes the status and the headers
  (``X-Service-File-Mode`` and, for existing clients, ``X-Slicer-File-Mode``,
  ``X-Slicer-Source-Type``, ``X-Slicer-Source-Name-Base64``); the content is
  then written as it arrives.  The download is the response's push producer,
  so a client that reads slowly withholds the guest's credit.  A failure after
  the headers aborts the connection, so the client sees a truncated body
  rather than a complete-looking one.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Optional

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.iweb import IRequest

from ..agent.client import AgentUnavailable
from ..agent.copying import CopyInterrupted, GuestUpload, start_download, start_upload
from ..agent.filesystem import format_mode
from ..errors import AgentNotConnected
from ..nodes.fleet import Fleet
from . import inputs
from .models import CopyResult, ErrorResponse
from .rendering import json_body
from .routing import Param, Reply, Route
from .streaming import RequestBody, request_body

log = Logger()

_CP_PATH = re.compile(rb"^/vm/[^/]+/cp/?$")


def streams_cp_body(method: bytes, path: bytes, query: dict[bytes, list[bytes]], headers: Headers) -> bool:
    """
    A :data:`~vmservice.api.streaming.BodyPredicate`: every upload streams its body.
    """
    return method == b"POST" and bool(_CP_PATH.match(path))


def name_header(name: str) -> bytes:
    """``X-Slicer-Source-Name-Base64``: the name as base64url without padding."""
    return base64.urlsafe_b64encode(name.encode("utf-8", "surrogateescape")).rstrip(b"=")


def _errors() -> dict[int, Reply]:
    return {
        400: Reply("Bad input: missing or relative path, bad mode (invalid mode: <m>), uid, gid or permissions; "
                   "a directory in binary mode; an unsafe or malformed tar", ErrorResponse),
        404: Reply("No such VM, or (download) no such path in the guest", ErrorResponse),
        409: Reply("The VM is paused", ErrorResponse),
        503: Reply("The VM's agent is not connected", ErrorResponse),
    }


def _abort_response(request: IRequest) -> Deferred[None]:
    """
    Drop the connection of a response whose headers are out: the client must
    see the body as truncated.  Fires (or fails) once the connection is gone.
    """
    finished: Deferred[None] = request.notifyFinish()
    transport = getattr(getattr(request, "channel", None), "transport", None)
    if transport is not None and hasattr(transport, "abortConnection"):
        transport.abortConnection()
    else:
        request.loseConnection()
    return finished


class CopyApi:
    """:param fleet: the nodes of this daemon."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def routes(self) -> list[Route]:
        path = Param("path", "Guest path: the file (binary) or directory (tar); absolute, ~ or ~/...", required=True)
        mode = Param("mode", "binary (default) or tar; absent: from Content-Type / Accept", enum=inputs.CP_MODES)
        return [
            Route(
                "POST", "/vm/{hostname}/cp", self.upload, "Copy a file or a tar stream into the node", "cp",
                {200: Reply("Written (a file replaced atomically; a tar extracted)", CopyResult), **_errors()},
                query=(
                    path, mode,
                    Param("uid", "Owner (default: the replaced file's, else root; 4294967295 = not set)", kind="integer"),
                    Param("gid", "Group (default like uid)", kind="integer"),
                    Param("permissions", "Octal mode of the file (binary) or of path (tar), e.g. 0644"),
                ),
            ),
            Route(
                "GET", "/vm/{hostname}/cp", self.download, "Copy a file or a tar of a directory out of the node", "cp",
                {200: Reply("The file's bytes, or a tar of the file or the directory's contents",
                            media="application/octet-stream"), **_errors()},
                query=(path, mode),
            ),
        ]

    async def upload(self, request: IRequest, hostname: str) -> bytes:
        body = request_body(request)
        try:
            upload_request = inputs.cp_upload_request(request)
            agent = self._fleet.agent(hostname)
            try:
                upload = start_upload(agent, upload_request)
            except AgentUnavailable as error:
                raise AgentNotConnected(str(error)) from None
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
        return json_body(request, CopyResult(path=result.path, mode=upload_request.mode, size=result.size,
                                             entries=result.entries))

    def _send_body(self, body: RequestBody, upload: GuestUpload) -> Deferred[Any]:
        """Stream ``body`` into the upload with back-pressure; end it with the body, abort it on a lost client."""
        upload.register_producer(body)
        delivered = body.deliver_to(upload.write)

        def ended(length: int) -> None:
            upload.unregister_producer()
            upload.end()

        def lost(failure: Failure) -> None:
            upload.abort()

        delivered.addCallbacks(ended, lost)
        return delivered

    async def download(self, request: IRequest, hostname: str) -> bytes:
        download_request = inputs.cp_download_request(request)
        agent = self._fleet.agent(hostname)
        try:
            download = start_download(agent, download_request)
        except AgentUnavailable as error:
            raise AgentNotConnected(str(error)) from None
        try:
            head = await download.head
        except BaseException:
            download.abort()
            raise
        mode = format_mode(head.mode).encode("ascii")
        request.setResponseCode(200)
        tar = download_request.mode == "tar"
        request.setHeader(b"Content-Type", b"application/x-tar" if tar else b"application/octet-stream")
        request.setHeader(b"X-Service-File-Mode", mode)
        request.setHeader(b"X-Slicer-File-Mode", mode)
        request.setHeader(b"X-Slicer-Source-Type", head.type.encode("ascii"))
        request.setHeader(b"X-Slicer-Source-Name-Base64", name_header(head.name))
        request.setHeader(b"Cache-Control", b"no-store")
        if not tar and head.size is not None:
            request.setHeader(b"Content-Length", str(head.size).encode("ascii"))
        request.registerProducer(download, True)
        download.deliver_to(request.write)
        try:
            await download.done
        except CopyInterrupted as error:
            log.warn("download of {path} from {hostname} interrupted: {error}", path=download_request.path,
                     hostname=hostname, error=str(error))
            request.unregisterProducer()
            finished: Optional[Deferred[None]] = _abort_response(request)
            try:
                await finished
            except Exception:
                pass
            return b""
        except CancelledError:
            download.abort()
            raise
        request.unregisterProducer()
        return b""


__all__ = ["CopyApi", "name_header", "streams_cp_body"]
