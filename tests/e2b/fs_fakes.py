"""
A guest's file system in memory, for the tests of the data plane's
filesystem service, watchers and ``/files`` routes: :class:`FsGuest` (the
file-system operations, copies both ways and watches of
:class:`~vmservice.guestport.guest.IGuest` the services use) over a dict of
:class:`Node`\\ s by path.
"""

from __future__ import annotations

import posixpath
from base64 import b64encode
from typing import Any, Callable

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from tests.e2b.envd_harness import EnvdCase
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.files import (DownloadHead, DownloadRequest, FsDetails, FsEntry, IDownload, IUpload,
                                       UploadRequest, UploadResult)
from vmservice.guestport.watch import IWatch, IWatchSink, WatchEvent, WatchRequest

NAMES = {0: "root", 1000: "user"}


@define
class Node:
    """One entry: a file (``data``), a directory or a symlink (``target``)."""

    type: str
    data: bytes = b""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    target: str = ""
    metadata: dict[str, str] = field(factory=dict)


def _missing(path: str) -> AgentError:
    return AgentError(GuestErrorKind.NOT_FOUND, f"{path}: No such file or directory")


@implementer(IUpload)
class FakeUpload:
    """An upload into :class:`FsGuest`: written when ended."""

    def __init__(self, guest: "FsGuest", request: UploadRequest) -> None:
        self.guest, self.request = guest, request
        self.received = bytearray()
        self.result: Deferred[UploadResult] = Deferred()
        self.producer: Any = None
        self.aborted = False
        self.most = 0

    def write(self, data: bytes) -> None:
        self.received += data
        self.most = max(self.most, len(data))

    def register_producer(self, producer: Any) -> None:
        self.producer = producer

    def unregister_producer(self) -> None:
        self.producer = None

    def end(self) -> None:
        failure = self.guest.fail_upload.get(self.request.path)
        if failure is not None:
            self.result.errback(failure)
            return
        self.guest.put(self.request.path, Node("file", bytes(self.received), uid=self.request.uid or 0,
                                               gid=self.request.gid or 0))
        self.result.callback(UploadResult(self.request.path, len(self.received)))

    def abort(self) -> None:
        self.aborted = True


@implementer(IDownload)
class FakeDownload:
    """A download out of :class:`FsGuest`: its content in slices of :attr:`SLICE` bytes, while resumed."""

    SLICE = 1000

    def __init__(self, content: bytes | None, name: str) -> None:
        self.content = content or b""
        self.head: Deferred[DownloadHead] = (
            succeed(DownloadHead("file", name, 0o644, len(self.content) or None)) if content is not None
            else Deferred())
        if content is None:
            self.head.errback(_missing(name))
        self.done: Deferred[None] = Deferred()
        self.paused = self.aborted = False
        self._write: Callable[[bytes], None] | None = None

    def deliver_to(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        self.resumeProducing()

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        while self._write is not None and self.content and not self.paused:
            piece, self.content = self.content[:self.SLICE], self.content[self.SLICE:]
            self._write(piece)
        if self._write is not None and not self.content and not self.done.called:
            self.done.callback(None)

    def stopProducing(self) -> None:
        self.abort()

    def abort(self) -> None:
        self.aborted = True


@implementer(IWatch)
class FakeWatch:
    """A watch of :class:`FsGuest`: ready at once; the test sends events to its sink."""

    def __init__(self, request: WatchRequest, sink: IWatchSink) -> None:
        self.request, self.sink = request, sink
        self.ready: Deferred[None] = succeed(None)
        self.cancelled = False

    def event(self, kind: str, path: str) -> None:
        self.sink.event(WatchEvent(kind, path, 0, False))

    def cancel(self) -> None:
        self.cancelled = True

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        self.cancel()


class FsGuest:
    """A guest whose file system is :attr:`nodes`, by absolute path (``/`` and ``/home/user`` at first)."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {"/": Node("directory", mode=0o755), "/home": Node("directory", mode=0o755),
                                       "/home/user": Node("directory", mode=0o755, uid=1000, gid=1000)}
        self.uploads: list[FakeUpload] = []
        self.downloads: list[FakeDownload] = []
        self.watches: list[FakeWatch] = []
        self.fail_upload: dict[str, AgentError] = {}

    def put(self, path: str, node: Node) -> None:
        parent = posixpath.dirname(path)
        if parent not in self.nodes:
            self.put(parent, Node("directory", mode=0o755, uid=node.uid, gid=node.gid))
        self.nodes[path] = node

    def _node(self, path: str) -> Node:
        if path not in self.nodes:
            raise _missing(path)
        return self.nodes[path]

    def entry(self, path: str, details: bool) -> FsEntry:
        node = self._node(path)
        extra = None
        if details:
            target = self.nodes.get(node.target) if node.type == "symlink" else None
            extra = FsDetails(node.uid, node.gid, NAMES.get(node.uid, str(node.uid)),
                              NAMES.get(node.gid, str(node.gid)),
                              symlink_target=(node.target if target else path) if node.type == "symlink" else None,
                              target_type=target.type if target else None,
                              target_mode=target.mode if target else None, metadata=tuple(sorted(node.metadata.items())))
        return FsEntry(posixpath.basename(path) or "/", node.type, len(node.data), 1_767_225_600_500_000_000,
                       node.mode, extra)

    async def stat(self, path: str, details: bool = False) -> FsEntry:
        return self.entry(path, details)

    async def readdir(self, path: str, details: bool = False) -> list[FsEntry]:
        node = self._node(path)
        if node.type == "symlink":
            path = node.target
        return [self.entry(child, details) for child in sorted(self.nodes)
                if child != "/" and posixpath.dirname(child) == path]

    async def make_directory(self, path: str, mode: int, uid: int, gid: int) -> FsEntry:
        if path in self.nodes:
            kind = GuestErrorKind.EXISTS if self.nodes[path].type == "directory" else GuestErrorKind.NOT_A_DIRECTORY
            raise AgentError(kind, f"{path}: exists")
        self.put(path, Node("directory", mode=mode, uid=uid, gid=gid))
        return self.entry(path, True)

    async def rename(self, source: str, destination: str, uid: int, gid: int) -> FsEntry:
        self._node(source)
        for path in sorted(self.nodes):
            if path == source or path.startswith(source + "/"):
                self.put(destination + path[len(source):], self.nodes.pop(path))
        return self.entry(destination, True)

    async def remove(self, path: str, recursive: bool) -> FsEntry:
        entry = self.entry(path, False)
        for child in [p for p in self.nodes if p == path or p.startswith(path + "/")]:
            del self.nodes[child]
        return entry

    async def set_metadata(self, path: str, metadata: tuple[tuple[str, str], ...]) -> FsEntry:
        self._node(path).metadata.update(metadata)
        return self.entry(path, True)

    def upload(self, request: UploadRequest) -> IUpload:
        self.uploads.append(FakeUpload(self, request))
        return self.uploads[-1]

    def download(self, request: DownloadRequest) -> IDownload:
        node = self.nodes.get(request.path)
        self.downloads.append(FakeDownload(node.data if node is not None else None, posixpath.basename(request.path)))
        return self.downloads[-1]

    def watch(self, request: WatchRequest, sink: IWatchSink) -> IWatch:
        self.watches.append(FakeWatch(request, sink))
        return self.watches[-1]


class FsCase(EnvdCase):
    """:class:`~tests.e2b.envd_harness.EnvdCase` serving every service of the daemon over an :class:`FsGuest`."""

    methods = None  # type: ignore[assignment]  # every method of vmservice.e2b.envd
    plain = None  # type: ignore[assignment]  # every route of vmservice.e2b.envd

    def make_guest(self) -> FsGuest:
        self.guest = FsGuest()
        return self.guest

    def fs(self, method: str, message: dict[str, Any], user: str | None = None) -> tuple[int, Any]:
        """A unary call of ``filesystem.Filesystem/<method>``, as ``user`` when given."""
        headers = {"Authorization": "Basic " + b64encode(f"{user}:".encode()).decode()} if user else None
        return self.unary(f"/filesystem.Filesystem/{method}", message, headers)
