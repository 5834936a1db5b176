# -*- test-case-name: tests.cli.test_copying,tests.integration.cli.test_copying -*-
"""
``vmctl cp``: copy files and directories between this machine and a guest.

A file goes as itself (``mode=binary``) with its permission bits; a directory
as an uncompressed tar stream of its contents (``mode=tar``), built and
extracted on the fly: :mod:`tarfile` runs in a thread on one end of a pipe
and the HTTP body streams through the other end, so neither side is ever
held whole in memory or on disk, and a slow side blocks the pipe (and so
the other side) instead of growing a buffer.

Destinations: a directory copy puts the *contents* of the source into the
destination directory, which is created if missing; a file copied to a
directory (an existing one, or a path ending in ``/``) keeps its base name.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import tempfile
from typing import Any, Callable, TextIO

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IConsumer, IProducer, IReactorThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

from ..durable import commit
from ..client import ApiError, Client, FdBodyProducer, IBodyReactor, body_producer
from . import output

__all__ = ["ICopyReactor", "Location", "Progress", "copy", "parse_location", "pack_directory", "unpack_into"]

#: How often the progress line is redrawn, in seconds.
PROGRESS_INTERVAL = 0.2


class CopyFailed(Exception):
    """A copy failed for a reason worded for the user."""


class ICopyReactor(IBodyReactor, IReactorThreads):
    """
    What :func:`copy` needs of its reactor: a clock for the progress line,
    pipes read as data arrives (see :class:`~vmservice.client.IBodyReactor`),
    and threads for :mod:`tarfile`.

    Every reactor Twisted installs provides all of these; this interface only
    names them together for the type checker (no reactor declares it).
    """


@frozen
class Location:
    """
    One side of ``vmctl cp``.

    :ivar host: the node's hostname, or ``None`` for this machine.
    :ivar path: the path there.
    """

    host: str | None
    path: str


def parse_location(text: str) -> Location:
    """
    ``HOST:PATH`` names a path in node ``HOST``; anything else is a local
    path.  A text that starts with ``/``, ``.`` or ``~``, or whose part before
    the first ``:`` holds a ``/`` or is empty, is local, so ``./a:b`` and
    ``/x:y`` are files here.
    """
    host, colon, path = text.partition(":")
    if not colon or not host or "/" in host or text.startswith((".", "~")):
        return Location(None, text)
    return Location(host, path)


class Progress:
    """
    A one-line progress bar on a terminal: bytes so far, of the total when
    known, and the mean rate; redrawn at most every
    :data:`PROGRESS_INTERVAL` seconds.  Nothing is drawn when ``err`` is not
    a terminal.

    :param clock: an ``IReactorTime`` provider.
    :param err: where the line is drawn.
    :param total: the expected number of bytes, or ``None``.
    """

    def __init__(self, clock: IReactorTime, err: TextIO, total: int | None) -> None:
        self._clock = clock
        self._err = err
        self._total = total
        self._shown = _isatty(err)
        self._start = clock.seconds()
        self._drawn_at: float | None = None
        self.done = 0

    def add(self, count: int) -> None:
        """``count`` more bytes were moved."""
        self.done += count
        now = self._clock.seconds()
        if self._shown and (self._drawn_at is None or now - self._drawn_at >= PROGRESS_INTERVAL):
            self._draw(now)

    def _draw(self, now: float) -> None:
        self._drawn_at = now
        self._err.write("\r" + output.format_progress(self.done, self._total, now - self._start) + "\x1b[K")
        self._err.flush()

    def finish(self) -> None:
        """Draw the final state and end the line."""
        if self._shown:
            self._draw(self._clock.seconds())
            self._err.write("\n")
            self._err.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


@implementer(IConsumer)
class _CountingConsumer:
    """Passes everything on to ``consumer``, counting the bytes written with ``count``."""

    def __init__(self, consumer: IConsumer, count: Callable[[int], None]) -> None:
        self._consumer = consumer
        self._count = count

    def write(self, data: bytes) -> None:
        self._count(len(data))
        self._consumer.write(data)

    def registerProducer(self, producer: IProducer, streaming: bool) -> None:
        self._consumer.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        self._consumer.unregisterProducer()


@implementer(IBodyProducer)
class _Counted:
    """A body producer whose bytes are counted on their way to the connection."""

    def __init__(self, inner: IBodyProducer, count: Callable[[int], None]) -> None:
        self._inner = inner
        self._count = count
        self.length = inner.length

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        done: Deferred[None] = self._inner.startProducing(_CountingConsumer(consumer, self._count))
        return done

    def pauseProducing(self) -> None:
        self._inner.pauseProducing()

    def resumeProducing(self) -> None:
        self._inner.resumeProducing()

    def stopProducing(self) -> None:
        self._inner.stopProducing()


# -- tar on the fly --------------------------------------------------------


def pack_directory(source: str, fd: int) -> None:
    """
    Write an uncompressed tar of the contents of directory ``source`` to
    file descriptor ``fd`` (entries relative to ``source``, no top-level
    directory; modes kept), then close ``fd``.  Runs in a thread: writes
    block while the pipe is full.  On failure ``fd`` is left open so the
    caller can fail the upload before the reader sees an end of file.
    """
    stream = os.fdopen(fd, "wb", closefd=False)
    with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(source)):
            tar.add(os.path.join(source, name), arcname=name)
    stream.close()
    os.close(fd)


def _keep_modes(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
    """
    :func:`tarfile.data_filter` (nothing outside ``destination``, no
    absolute paths or links out, no devices, no owners), but with the
    permission bits of files and directories as the tar says (without
    setuid, setgid and sticky), so modes such as ``0775`` survive.
    """
    checked = tarfile.data_filter(member, destination)
    if checked is None or not (checked.isreg() or checked.isdir()):
        return checked
    return checked.replace(mode=member.mode & 0o777, deep=False)


def unpack_into(fd: int, destination: str) -> None:
    """
    Extract the tar stream read from ``fd`` into ``destination`` (streaming
    mode: read once, front to back), then read to the end of the stream so
    the writer never sees a broken pipe, and close ``fd``.  Runs in a
    thread.

    :raise tarfile.TarError: the stream is not a tar, or an entry is refused
        (absolute, climbing out with ``..``, a link pointing out).
    """
    with os.fdopen(fd, "rb") as stream:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            tar.extractall(destination, filter=_keep_modes)
        while stream.read(1 << 16):
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# -- the copies ------------------------------------------------------------


async def _remote_directory(client: Client, host: str, path: str) -> bool:
    if path.endswith("/"):
        return True
    try:
        entry = await client.stat(host, path)
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return entry.get("type") == "directory"


async def _upload(
    reactor: ICopyReactor,
    client: Client,
    source: str,
    host: str,
    destination: str,
    err: TextIO,
    uid: int | None,
    gid: int | None,
) -> None:
    if os.path.isdir(source):
        progress = Progress(reactor, err, None)
        read_end, write_end = os.pipe()
        producer = FdBodyProducer(reactor, read_end)
        packed = deferToThreadPool(reactor, reactor.getThreadPool(), pack_directory, source, write_end)
        pack_error: list[Failure] = []

        def packing_failed(failure: Failure) -> None:
            pack_error.append(failure)
            producer.abort(failure)
            os.close(write_end)

        packed.addErrback(packing_failed)
        try:
            await client.upload(
                host, destination or ".", _Counted(producer, progress.add), mode="tar", uid=uid, gid=gid
            )
        except Exception:
            if pack_error:
                raise CopyFailed(f"cannot read {source}: {pack_error[0].getErrorMessage()}") from None
            raise
        finally:
            producer.stopProducing()
            os.close(read_end)
            await packed
        progress.finish()
        return
    try:
        source_file = open(source, "rb")
    except OSError as error:
        raise CopyFailed(f"cannot read {source}: {error.strerror or error}") from None
    with source_file:
        info = os.fstat(source_file.fileno())
        if not destination or await _remote_directory(client, host, destination):
            destination = posixpath.join(destination or ".", os.path.basename(source.rstrip("/")))
        progress = Progress(reactor, err, info.st_size)
        await client.upload(
            host,
            destination,
            _Counted(body_producer(reactor, source_file), progress.add),
            mode="binary",
            uid=uid,
            gid=gid,
            permissions=info.st_mode & 0o7777,
        )
    progress.finish()


async def _download(
    reactor: ICopyReactor, client: Client, host: str, source: str, destination: str, err: TextIO
) -> None:
    entry = await client.stat(host, source)
    if entry.get("type") == "directory":
        if os.path.exists(destination) and not os.path.isdir(destination):
            raise CopyFailed(f"{destination} exists and is not a directory")
        os.makedirs(destination, exist_ok=True)
        progress = Progress(reactor, err, None)
        read_end, write_end = os.pipe()
        unpacked = deferToThreadPool(reactor, reactor.getThreadPool(), unpack_into, read_end, destination)
        unpack_error: list[Failure] = []
        unpacked.addErrback(unpack_error.append)

        def write(data: bytes) -> None:
            progress.add(len(data))
            _write_all(write_end, data)

        try:
            await client.download(host, source, write=write, mode="tar")
        except BrokenPipeError:
            pass  # the extraction stopped: its error is reported below
        finally:
            os.close(write_end)
            await unpacked
        if unpack_error:
            raise CopyFailed(f"cannot extract into {destination}: {unpack_error[0].getErrorMessage()}")
        progress.finish()
        return
    target = destination
    if os.path.isdir(target) or target.endswith("/"):
        target = os.path.join(target, posixpath.basename(source.rstrip("/")) or "file")
    directory = os.path.dirname(os.path.abspath(target))
    try:
        fd, partial = tempfile.mkstemp(prefix=".vmctl-", dir=directory)
    except OSError as error:
        raise CopyFailed(f"cannot write into {directory}: {error.strerror or error}") from None
    size = entry.get("size")
    progress = Progress(reactor, err, size if isinstance(size, int) else None)
    try:
        with os.fdopen(fd, "wb") as sink:

            def write(data: bytes) -> None:
                progress.add(len(data))
                sink.write(data)

            download = await client.download(host, source, write=write, mode="binary")
        mode = download.mode
        if mode is None:
            mode = _mode_of(entry)
        os.chmod(partial, 0o644 if mode is None else mode & 0o7777)
        commit(partial, target)
    except BaseException:
        try:
            os.unlink(partial)
        except OSError:
            pass
        raise
    progress.finish()


def _mode_of(entry: dict[str, Any]) -> int | None:
    text = entry.get("mode")
    try:
        return int(text, 8) if isinstance(text, str) else None
    except ValueError:
        return None


async def copy(
    reactor: ICopyReactor,
    client: Client,
    source: Location,
    destination: Location,
    err: TextIO,
    uid: int | None = None,
    gid: int | None = None,
) -> None:
    """
    Copy ``source`` to ``destination``; exactly one of them is in a node.

    :param reactor: an ``IReactorTime``, ``IReactorFDSet`` and
        ``IReactorThreads`` provider (see :class:`ICopyReactor`).
    :param err: where the progress bar is drawn (when it is a terminal).
    :param uid: the owner of what is written in the guest.
    :param gid: the group of what is written in the guest.
    :raise CopyFailed: a local problem, worded for the user.
    :raise ApiError: the daemon refused.
    """
    try:
        if source.host is None and destination.host is not None:
            await _upload(reactor, client, source.path, destination.host, destination.path, err, uid, gid)
        elif source.host is not None and destination.host is None:
            await _download(reactor, client, source.host, source.path, destination.path, err)
        else:
            raise CopyFailed("exactly one of SRC and DST must be HOST:PATH")
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        raise CopyFailed(f"{where}{error.strerror or error}") from None
