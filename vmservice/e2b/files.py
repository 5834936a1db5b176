# -*- test-case-name: tests.e2b.test_files -*-
"""
envd's plain ``/files`` routes over a sandbox's guest copies
(:meth:`~vmservice.guestport.guest.IGuest.download` and ``upload``), each
streamed: no file is ever held whole in the daemon's memory.

- ``GET /files?path=&username=``: the file's bytes (``application/octet-stream``,
  ``Content-Disposition: inline; filename=<base name>``), gzip-compressed as
  they go when ``Accept-Encoding`` allows gzip; 404 for a missing path, 400
  for a directory.
- ``POST /files``: ``application/octet-stream`` with ``?path=`` (one file), or
  ``multipart/form-data`` whose ``file`` parts are each a file at the part's
  filename (or at ``?path=`` when given), read as it arrives
  (:mod:`.multipart`); either may be ``Content-Encoding: gzip``
  (:mod:`.inflating`).  Each file is written as the user, replacing what was
  there, its missing parents made; ``X-Metadata-<key>`` headers become its
  ``user.e2b.<key>`` attributes.  The answer is ``[{"path", "name",
  "type": "file"}]``.

A path is resolved for the user (:func:`.entries.resolve`), the user named
by ``username`` (the default user without one).  A request without the
sandbox's access token must be signed (:mod:`.signing`).  Refusals are
envd's: ``{"code": <status>, "message": ...}``.
"""

from __future__ import annotations

import json
import posixpath
import zlib
from typing import Any, Callable, Mapping, cast

from twisted.internet.defer import CancelledError
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.web.iweb import IRequest
from twisted.web.server import Request

from ..api.streaming import drop_connection, request_body
from ..errors import AgentError, GuestErrorKind
from ..guestport.files import DownloadRequest, IUpload, UploadRequest
from ..guestport.guest import IGuest
from ..wire.openheaders.fields import BadHeader
from ..wire.openheaders.fs import checked_metadata
from .connect import ConnectError
from .control import answer
from .data_plane import EnvdCall, PlainHandler, media_type
from .entries import resolve
from .failures import error_body
from .inflating import BadGzip, Inflater
from .multipart import MultipartError, MultipartReader, PartHead, boundary_of
from .signing import BadQuery, FilesQuery, check_signature, files_query, operation_of
from .users import EnvdUser, user_named

#: The HTTP status of a guest's failure of a copy, by its kind (the others are 500).
COPY_STATUSES = {GuestErrorKind.NOT_FOUND: 404, GuestErrorKind.MISSING_DESTINATION: 404,
                 GuestErrorKind.IS_A_DIRECTORY: 400, GuestErrorKind.NOT_A_DIRECTORY: 400,
                 GuestErrorKind.INVALID: 400, GuestErrorKind.REJECTED: 400, GuestErrorKind.NO_SPACE: 507,
                 GuestErrorKind.OVER_BUDGET: 507, GuestErrorKind.UNAVAILABLE: 502}
#: The prefix of a metadata header.
METADATA_HEADER = b"x-metadata-"


class Refusal(Exception):
    """An answer of envd's ``{"code", "message"}`` form."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def refusal_of(error: BaseException) -> Refusal:
    """The answer to ``error``."""
    if isinstance(error, Refusal):
        return error
    if isinstance(error, AgentError):
        return Refusal(COPY_STATUSES.get(error.kind, 500), str(error.message))
    if isinstance(error, (MultipartError, BadGzip, BadQuery)):
        return Refusal(400, str(error))
    return Refusal(500, "internal error")


def disposition(name: str) -> bytes:
    """``inline; filename=<name>`` as Go's ``mime.FormatMediaType`` writes it."""
    token = name and all(c.isascii() and (c.isalnum() or c in "!#$%&'*+-.^_`|~") for c in name)
    if token:
        return f"inline; filename={name}".encode("ascii")
    if name.isascii():
        return ('inline; filename="' + name.replace("\\", "\\\\").replace('"', '\\"') + '"').encode("ascii")
    quoted = "".join(c if c.isascii() and (c.isalnum() or c in "!#$&+-.^_`|~") else
                     "".join(f"%{byte:02X}" for byte in c.encode("utf-8")) for c in name)
    return f"inline; filename*=utf-8''{quoted}".encode("ascii")


def accepts_gzip(header: bytes | None) -> bool:
    """Whether an ``Accept-Encoding`` header allows gzip (named, or ``*``, with a non-zero quality)."""
    for item in (header or b"").split(b","):
        coding, _, params = item.strip().partition(b";")
        if coding.strip().lower() in (b"gzip", b"*"):
            quality = params.strip().lower()
            return not (quality.startswith(b"q=") and quality[2:].strip(b" 0.") == b"")
    return False


def metadata_headers(request: IRequest) -> tuple[tuple[str, str], ...]:
    """The metadata of ``X-Metadata-<key>`` headers (keys lower-cased, each key's first value)."""
    found: dict[str, str] = {}
    for name, values in request.requestHeaders.getAllRawHeaders():
        lowered = name.lower()
        if lowered.startswith(METADATA_HEADER) and len(lowered) > len(METADATA_HEADER) and values:
            found.setdefault(lowered[len(METADATA_HEADER):].decode("latin-1"), values[0].decode("latin-1"))
    try:
        return checked_metadata(found)
    except BadHeader as error:
        raise Refusal(400, f"invalid metadata: {error}") from None


class _Uploads:
    """
    The files of one upload, each a guest upload fed as its bytes arrive:
    a multipart body's listener, or one file's writer (:meth:`data`).
    """

    def __init__(self, guest: IGuest, user: EnvdUser, fixed_path: str) -> None:
        self.guest, self.user, self.fixed_path = guest, user, fixed_path
        self.producer: IPushProducer | None = None
        self.current: IUpload | None = None
        self.started: list[tuple[str, IUpload]] = []
        self.done: set[int] = set()
        self.skipping = False

    def begin(self, named: str) -> None:
        try:
            path = resolve(named, self.user)
        except ConnectError as error:
            raise Refusal(400, f"error resolving path: {error.message}") from None
        if any(path == started for started, _ in self.started):
            raise Refusal(400, f"you cannot upload multiple files to the same path '{path}' in one upload "
                               "request, only the first specified file was uploaded")
        upload = self.guest.upload(UploadRequest(path, "binary", self.user.uid, self.user.gid))
        if self.producer is not None:
            upload.register_producer(self.producer)
        self.current = upload
        self.started.append((path, upload))
        index = len(self.started) - 1

        def settled(result: object) -> object:
            self.done.add(index)
            return result
        upload.result.addBoth(settled)

    def part(self, head: PartHead) -> None:
        self.skipping = head.name != "file"
        if not self.skipping:
            named = self.fixed_path or head.filename
            if not named:
                raise Refusal(400, "error getting multipart custom part file name: the part has no filename")
            self.begin(named)

    def data(self, data: bytes) -> None:
        if self.current is not None and not self.skipping:
            self.current.write(data)

    def part_end(self) -> None:
        if self.current is not None:
            self.current.unregister_producer()
            self.current.end()
            self.current = None

    def abort(self) -> None:
        """Give up every upload not yet written."""
        for index, (_, upload) in enumerate(self.started):
            if index not in self.done:
                upload.abort()


class FileRoutes:
    """
    ``GET`` and ``POST /files``.

    :param clock: the reactor's clock (signatures' expiry).
    """

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock

    def routes(self) -> dict[tuple[bytes, str], PlainHandler]:
        """The routes, by method and path."""
        return {(b"GET", "/files"): self._answered(self.download), (b"POST", "/files"): self._answered(self.upload)}

    def _answered(self, route: Callable[[EnvdCall, IRequest, FilesQuery, EnvdUser], Any]) -> PlainHandler:
        async def handler(call: EnvdCall, request: IRequest) -> None:
            try:
                query = files_query(request.args or {})
                self._authorize(call, request, query)
                try:
                    user = user_named(query.username)
                except ConnectError as error:
                    raise Refusal(401, f"error looking up user '{(query.username or '')[:64]}': {error.message}")
                await route(call, request, query, user)
            except CancelledError:
                raise
            except Exception as error:
                refusal = refusal_of(error)
                if getattr(request, "startedWriting", False):
                    drop_connection(request)
                    return
                answer(request, refusal.status, error_body(refusal.status, refusal.message),
                       {b"X-Content-Type-Options": b"nosniff"})
        return handler

    def _authorize(self, call: EnvdCall, request: IRequest, query: FilesQuery) -> None:
        if call.token_ok:
            return
        if request.getHeader(b"x-access-token"):
            raise Refusal(401, "access token present in header but does not match")
        why = check_signature(query, operation_of(request.method), call.sandbox.access_token, self._clock.seconds())
        if why is not None:
            raise Refusal(401, why)

    async def download(self, call: EnvdCall, request: IRequest, query: FilesQuery, user: EnvdUser) -> None:
        """``GET /files``: the file's bytes."""
        try:
            path = resolve(query.path, user)
        except ConnectError as error:
            raise Refusal(400, f"error expanding and resolving path '{query.path[:200]}': {error.message}") from None
        try:
            entry = await call.guest.stat(path, details=True)
        except AgentError as error:
            if error.kind is GuestErrorKind.NOT_FOUND:
                raise Refusal(404, f"path '{path}' does not exist") from None
            raise
        details = entry.details
        if entry.type == "directory" or (details is not None and details.target_type == "directory"):
            raise Refusal(400, f"path '{path}' is a directory")
        download = call.guest.download(DownloadRequest(path, "binary"))
        try:
            head = await download.head
            gzip = accepts_gzip(request.getHeader(b"accept-encoding"))
            request.setResponseCode(200)
            request.setHeader(b"Content-Type", b"application/octet-stream")
            request.setHeader(b"Content-Disposition", disposition(posixpath.basename(path)))
            request.setHeader(b"Vary", b"Accept-Encoding")
            write: Callable[[bytes], None] = request.write
            compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if gzip else None
            if compressor is not None:
                request.setHeader(b"Content-Encoding", b"gzip")
                write = lambda data: request.write(compressor.compress(data))  # noqa: E731
            else:
                request.setHeader(b"Content-Length", str(head.size or 0).encode("ascii"))
            cast(Request, request).registerProducer(download, True)
            download.deliver_to(write)
            await download.done
        except BaseException:
            download.abort()
            raise
        cast(Request, request).unregisterProducer()
        if compressor is not None:
            request.write(compressor.flush())
        request.finish()

    async def upload(self, call: EnvdCall, request: IRequest, query: FilesQuery, user: EnvdUser) -> None:
        """``POST /files``: each file written as it arrives, then its metadata set."""
        body = request_body(request)
        uploads = _Uploads(call.guest, user, query.path)
        try:
            await self._receive(request, body, uploads)
            written = [(path, await upload.result) for path, upload in uploads.started]
        except BaseException:
            uploads.abort()
            body.stopProducing()
            raise
        metadata = metadata_headers(request)
        answered = []
        for path, _ in written:
            item: dict[str, Any] = {"path": path, "name": posixpath.basename(path), "type": "file"}
            if metadata:
                entry = await call.guest.set_metadata(path, metadata)
                if entry.details is not None and entry.details.metadata:
                    item["metadata"] = dict(entry.details.metadata)
            answered.append(item)
        answer(request, 200, json.dumps(answered).encode())

    async def _receive(self, request: IRequest, body: Any, uploads: _Uploads) -> None:
        """Read the body into ``uploads`` as it arrives."""
        metadata_headers(request)
        media = media_type(request)
        reader: MultipartReader | None = None
        if media == b"application/octet-stream":
            if not uploads.fixed_path:
                raise Refusal(400, "path query parameter is required for raw body upload")
            consume: Callable[[bytes], None] = uploads.data
        elif media.startswith(b"multipart/"):
            reader = MultipartReader(boundary_of(request.getHeader(b"content-type") or b""), uploads)
            consume = reader.feed
        else:
            raise Refusal(400, f"unsupported content type: {media.decode('latin-1')[:100]}, expected "
                               "multipart/form-data or application/octet-stream")
        encoding = (request.getHeader(b"content-encoding") or b"identity").strip().lower()
        if encoding not in (b"gzip", b"identity", b""):
            raise Refusal(400, f"unsupported Content-Encoding: {encoding.decode('latin-1')[:40]}")
        inflater = Inflater(body, consume) if encoding == b"gzip" else None
        uploads.producer = inflater or body
        if reader is None:
            uploads.begin(uploads.fixed_path)
        await _delivered(body, inflater.feed if inflater is not None else consume)
        if inflater is not None:
            await inflater.end()
        if reader is not None:
            reader.end()
        uploads.part_end()


async def _delivered(body: Any, write: Callable[[bytes], None]) -> None:
    """Deliver ``body`` to ``write``; what ``write`` raised stops the body and is raised here."""
    failed: list[Exception] = []

    def guarded(data: bytes) -> None:
        if failed:
            return
        try:
            write(data)
        except Exception as error:
            failed.append(error)
            body.stopProducing()

    await body.deliver_to(guarded)
    if failed:
        raise failed[0]


def files_routes(clock: IReactorTime) -> Mapping[tuple[bytes, str], PlainHandler]:
    """``GET`` and ``POST /files``."""
    return FileRoutes(clock).routes()


__all__ = ["COPY_STATUSES", "FileRoutes", "Refusal", "accepts_gzip", "disposition", "files_routes",
           "metadata_headers", "refusal_of"]
