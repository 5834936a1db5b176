# -*- test-case-name: tests.cli.test_copying,tests.integration.cli.test_copying -*-
"""
``vmctl cp``: copy files and directories between this machine and a guest,
placed the way ``cp -r`` places them (the daemon's ``cp-v1`` semantics).

A file goes as itself (``mode=cp-v1-binary``) with its permission bits; a
directory as an uncompressed tar stream of its contents (``mode=cp-v1-tar``),
built and extracted on the fly: :mod:`tarfile` runs in a thread on one end of
a pipe and the HTTP body streams through the other end, so neither side is
ever held whole in memory or on disk, and a slow side blocks the pipe (and so
the other side) instead of growing a buffer.  Downloads ask for
``cp-v1-recursive`` and learn from the headers whether a file or a tar comes.

Destinations, both ways (:func:`file_destination`, :func:`directory_destination`):
a file goes into an existing directory under its name, over an existing file,
or to a new path (a missing path ending in ``/`` is an error); a directory
goes into an existing directory under its name (merged if that exists), or
becomes a missing path; a source ending in ``/.`` copies a directory's
*contents* into the destination.  Uploads are placed by the guest, downloads
here by the same rules.  The tar streams are made and read by
:mod:`~vmservice.cli.tar_streams`, the progress bar drawn by :mod:`~vmservice.cli.progress`.
"""

from __future__ import annotations

import functools
import os
import posixpath
import shutil
import tempfile
from typing import Awaitable, Callable, Sequence, TextIO

from attrs import frozen
from twisted.internet.interfaces import IReactorThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure

from ..durable import commit
from ..client import Client, Download, FdBodyProducer, IBodyReactor, body_producer
from ..client.pods import POD_PREFIX
from ..wire.excludes import Excludes
from .progress import Counted, Progress
from .tar_streams import pack_directory, unpack_into, unpacked_size, write_all

__all__ = [
    "CopyFailed",
    "ICopyReactor",
    "Location",
    "copy",
    "copy_contents",
    "directory_destination",
    "file_destination",
    "parse_location",
]


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
    ``HOST:PATH`` names a path in node ``HOST``, ``pod/[NAMESPACE/]NAME:PATH``
    one in a VM pod (its ``host`` resolved later, see
    :mod:`~vmservice.cli.pods`); anything else is a local path.  A text that
    starts with ``/``, ``.`` or ``~``, or whose part before the first ``:``
    holds a ``/`` (but after ``pod/``) or is empty, is local, so ``./a:b``,
    ``/x:y`` and ``./pod/x:y`` are files here.
    """
    host, colon, path = text.partition(":")
    if colon and host.startswith(POD_PREFIX):
        return Location(host, path)
    if not colon or not host or "/" in host or text.startswith((".", "~")):
        return Location(None, text)
    return Location(host, path)


# -- the copies ------------------------------------------------------------


def copy_contents(path: str) -> bool:
    """
    Whether ``path`` names a directory's contents rather than the directory
    itself: ``dir/.``, ``.`` or ``/`` (as ``cp -r dir/. dest`` reads them).
    """
    stripped = path.rstrip("/")
    return stripped in ("", ".") or stripped.endswith("/.")


def file_destination(destination: str, name: str) -> str:
    """
    Where a file named ``name`` copied to the local ``destination`` goes: an
    existing directory receives ``destination/name``; an existing file is
    replaced; a missing path ending in ``/`` is an error; any other path is
    the file.

    :raise CopyFailed: the destination directory does not exist.
    """
    if os.path.isdir(destination):
        return os.path.join(destination, name)
    if not os.path.exists(destination) and destination.endswith("/"):
        raise CopyFailed(f"{destination}: no such directory")
    return destination


def directory_destination(destination: str, name: str | None, contents: bool) -> tuple[str, bool]:
    """
    Where a directory named ``name`` copied to the local ``destination``
    goes, and whether that directory exists (the copy is merged into it):
    an existing non-directory is an error; an existing directory receives
    the contents themselves (``contents``) or ``destination/name``; a missing
    path becomes the directory.

    :raise CopyFailed: the destination is not a directory, or the source's
        name is unknown where it is needed.
    """
    if os.path.exists(destination) and not os.path.isdir(destination):
        raise CopyFailed(f"{destination} exists and is not a directory")
    if not os.path.exists(destination):
        return destination, False
    if contents:
        return destination, True
    if not name:
        raise CopyFailed("the daemon did not name the directory copied; copy its contents with SRC/.")
    target = os.path.join(destination, name)
    if os.path.exists(target) and not os.path.isdir(target):
        raise CopyFailed(f"{target} exists and is not a directory")
    return target, os.path.isdir(target)


async def _upload(
    reactor: ICopyReactor,
    client: Client,
    source: str,
    host: str,
    destination: str,
    err: TextIO,
    uid: int | None,
    gid: int | None,
    excludes: Excludes,
) -> None:
    """Copy ``source`` here into ``destination`` in node ``host``: a directory as a tar, a file as itself."""
    name = os.path.basename(os.path.abspath(source))
    upload = functools.partial(client.upload, host, destination or "~/", uid=uid, gid=gid)
    if os.path.isdir(source):
        await _upload_directory(reactor, upload, source, name, err, excludes)
    else:
        await _upload_file(reactor, upload, source, name, err)


async def _upload_directory(
    reactor: ICopyReactor, upload: Callable[..., Awaitable[None]], source: str, name: str, err: TextIO,
    excludes: Excludes,
) -> None:
    """Upload directory ``source`` as a tar packed on a thread into a pipe, its other end the request's body."""
    size = unpacked_size(source, excludes)
    progress = Progress(reactor, err, None)
    read_end, write_end = os.pipe()
    producer = FdBodyProducer(reactor, read_end)
    packed = deferToThreadPool(reactor, reactor.getThreadPool(), pack_directory, source, write_end, excludes)
    pack_error: list[Failure] = []

    def packing_failed(failure: Failure) -> None:
        pack_error.append(failure)
        producer.abort(failure)
        os.close(write_end)

    packed.addErrback(packing_failed)
    try:
        await upload(
            Counted(producer, progress.add), mode="cp-v1-tar", source_name=name or None,
            copy_contents=copy_contents(source), exclude=excludes.patterns, unpacked_size=size,
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


async def _upload_file(
    reactor: ICopyReactor, upload: Callable[..., Awaitable[None]], source: str, name: str, err: TextIO
) -> None:
    """Upload file ``source`` with its permission bits."""
    try:
        source_file = open(source, "rb")
    except OSError as error:
        raise CopyFailed(f"cannot read {source}: {error.strerror or error}") from None
    with source_file:
        info = os.fstat(source_file.fileno())
        progress = Progress(reactor, err, info.st_size)
        await upload(
            Counted(body_producer(reactor, source_file), progress.add),
            mode="cp-v1-binary",
            permissions=info.st_mode & 0o7777,
            source_name=name,
            unpacked_size=info.st_size,
        )
    progress.finish()


class _FileSink:
    """A downloaded file: written beside its target, renamed into place by :meth:`commit`."""

    def __init__(self, target: str, progress: Progress) -> None:
        directory = os.path.dirname(os.path.abspath(target))
        try:
            fd, self.partial = tempfile.mkstemp(prefix=".vmctl-", dir=directory)
        except OSError as error:
            raise CopyFailed(f"cannot write into {directory}: {error.strerror or error}") from None
        self.target = target
        self._file = os.fdopen(fd, "wb")
        self.progress = progress

    def write(self, data: bytes) -> None:
        self.progress.add(len(data))
        self._file.write(data)

    def commit(self, mode: int | None) -> None:
        self._file.close()
        os.chmod(self.partial, 0o644 if mode is None else mode & 0o7777)
        commit(self.partial, self.target)

    def discard(self) -> None:
        self._file.close()
        try:
            os.unlink(self.partial)
        except OSError:
            pass


class _TreeSink:
    """
    A downloaded tar, extracted on a thread from a pipe: into a new hidden
    directory renamed into place at the end, or into an existing directory.
    """

    def __init__(self, reactor: ICopyReactor, target: str, exists: bool, progress: Progress) -> None:
        self.target = target
        self.staging: str | None = None
        into = target
        if not exists:
            parent = os.path.dirname(os.path.abspath(target))
            os.makedirs(parent, exist_ok=True)
            self.staging = into = tempfile.mkdtemp(prefix=".vmctl-", dir=parent)
        self.progress = progress
        read_end, self._write_end = os.pipe()
        self._failure: list[Failure] = []
        self.unpacked = deferToThreadPool(reactor, reactor.getThreadPool(), unpack_into, read_end, into)
        self.unpacked.addErrback(self._failure.append)

    def write(self, data: bytes) -> None:
        self.progress.add(len(data))
        try:
            write_all(self._write_end, data)
        except BrokenPipeError:
            pass  # the extraction stopped: its error is reported by finish()

    async def finish(self, complete: bool) -> None:
        """Wait for the extraction; put a new directory in place when it and the download succeeded."""
        os.close(self._write_end)
        await self.unpacked
        if self._failure or not complete:
            self._discard()
            if self._failure and complete:
                raise CopyFailed(f"cannot extract into {self.target}: {self._failure[0].getErrorMessage()}")
            return
        if self.staging is not None:
            os.chmod(self.staging, 0o755)
            os.rename(self.staging, self.target)

    def _discard(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)


async def _download(
    reactor: ICopyReactor, client: Client, host: str, source: str, destination: str, err: TextIO, excludes: Excludes
) -> None:
    """Copy ``source`` in node ``host`` to ``destination`` here, a file or a tree as the headers say."""
    sinks: list[_FileSink | _TreeSink] = []
    contents = copy_contents(source)

    def sink(info: Download) -> Callable[[bytes], None]:
        progress = Progress(reactor, err, info.length)
        name = info.source_name or posixpath.basename(source.rstrip("/")) or "file"
        if not info.tar:
            chosen: _FileSink | _TreeSink = _FileSink(file_destination(destination, name), progress)
        else:
            target, exists = directory_destination(destination, info.source_name, contents)
            chosen = _TreeSink(reactor, target, exists, progress)
        sinks.append(chosen)
        return chosen.write

    try:
        download = await client.download(host, source, sink=sink, mode="cp-v1-recursive", exclude=excludes.patterns)
    except BaseException:
        for chosen in sinks:
            if isinstance(chosen, _FileSink):
                chosen.discard()
            else:
                await chosen.finish(complete=False)
        raise
    for chosen in sinks:
        if isinstance(chosen, _FileSink):
            try:
                chosen.commit(download.mode)
            except BaseException:
                chosen.discard()
                raise
        else:
            await chosen.finish(complete=True)
        chosen.progress.finish()


async def copy(
    reactor: ICopyReactor,
    client: Client,
    source: Location,
    destination: Location,
    err: TextIO,
    uid: int | None = None,
    gid: int | None = None,
    exclude: Sequence[str] = (),
) -> None:
    """
    Copy ``source`` to ``destination``; exactly one of them is in a node.

    :param reactor: an ``IReactorTime``, ``IReactorFDSet`` and
        ``IReactorThreads`` provider (see :class:`ICopyReactor`).
    :param err: where the progress bar is drawn (when it is a terminal).
    :param uid: the owner of what is written in the guest.
    :param gid: the group of what is written in the guest.
    :param exclude: patterns of entries below a copied directory that are
        left out (:mod:`vmservice.wire.excludes`).
    :raise CopyFailed: a local problem, worded for the user.
    :raise ApiError: the daemon refused.
    """
    excludes = Excludes(exclude)
    try:
        if source.host is None and destination.host is not None:
            await _upload(reactor, client, source.path, destination.host, destination.path, err, uid, gid, excludes)
        elif source.host is not None and destination.host is None:
            await _download(reactor, client, source.host, source.path, destination.path, err, excludes)
        else:
            raise CopyFailed("exactly one of SRC and DST must be HOST:PATH")
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        raise CopyFailed(f"{where}{error.strerror or error}") from None