# -*- test-case-name: tests.agent.test_copying,tests.agent.test_filesystem -*-
"""
Files in a node's guest: copies into it (:meth:`vmservice.guestport.guest.IGuest.upload`)
and out of it (:meth:`~vmservice.guestport.guest.IGuest.download`), and the
entries its file-system operations describe.
"""

from __future__ import annotations

from typing import Any, Callable

from attrs import field, frozen
from twisted.internet.interfaces import IPushProducer
from zope.interface import Attribute, Interface

from vmservice.wire.openheaders.copy import DownloadHeader, UploadHeader


#: One copy into the guest: the upload's OPEN header itself, so its fields and
#: their checks are written once (see :class:`~vmservice.wire.openheaders.copy.UploadHeader`).
UploadRequest = UploadHeader


@frozen
class UploadResult:
    """
    What the guest wrote.

    :ivar path: the file or directory written (``~`` expanded).
    :ivar size: body bytes received.
    :ivar entries: tar entries extracted (``None`` for binary).
    """

    path: str
    size: int
    entries: int | None = None


class IUpload(Interface):
    """
    A copy into the guest in progress: write the body, end it, await
    :attr:`result` (which may fail before the body was all sent).
    """

    result = Attribute("A Deferred firing with the UploadResult, or failing with an AgentError.")

    def write(data: bytes) -> None:
        """Send body bytes (buffered until the guest takes them)."""

    def register_producer(producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take more."""

    def unregister_producer() -> None:
        """Forget the producer."""

    def end() -> None:
        """The body is complete: the guest may commit it."""

    def abort() -> None:
        """Give up: the guest removes what it was writing."""


#: One copy out of the guest: the download's OPEN header itself (see
#: :class:`~vmservice.wire.openheaders.copy.DownloadHeader`).
DownloadRequest = DownloadHeader


#: Bytes a download's head may announce: no file is larger (``off_t``).
MAX_DOWNLOAD_SIZE = 2**63 - 1
#: Bytes of a download's name (``NAME_MAX``).
MAX_NAME_BYTES = 255


def usable_name(value: object) -> bool:
    """
    Whether ``value`` is a name a download may give: ``/`` (the root), or a base name of 1 to
    :data:`MAX_NAME_BYTES` bytes once encoded as the guest's file names are (``surrogateescape``),
    without NUL or ``/``.
    """
    if not isinstance(value, str):
        return False
    if value == "/":
        return True
    try:
        length = len(value.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return False
    return 0 < length <= MAX_NAME_BYTES and "\0" not in value and "/" not in value


def usable_size(value: object) -> bool:
    """Whether ``value`` is a size a download may announce: an integer from 0 to :data:`MAX_DOWNLOAD_SIZE`."""
    return type(value) is int and 0 <= value <= MAX_DOWNLOAD_SIZE


def _check_type(instance: object, attribute: object, value: Any) -> None:
    if value not in ("file", "directory"):
        raise ValueError(f"type {str(value)[:32]!r} is neither file nor directory")


def _check_name(instance: object, attribute: object, value: Any) -> None:
    if value != "" and not usable_name(value):
        raise ValueError("not a name a download may give")


def _check_mode(instance: object, attribute: object, value: Any) -> None:
    if type(value) is not int or not 0 <= value <= 0o7777:
        raise ValueError("the mode is not permission bits (0 to 07777)")


def _check_size(instance: object, attribute: object, value: Any) -> None:
    if value is not None and not usable_size(value):
        raise ValueError(f"the size is not a count of bytes (0 to {MAX_DOWNLOAD_SIZE})")


@frozen
class DownloadHead:
    """
    What the guest says before the content, in values the response's headers can carry: the guest's own
    words are untrusted, and the agent code makes them these (its values go into the response's headers).

    :ivar type: ``file`` or ``directory`` (the source, not the stream's format).
    :ivar name: the source's base name (:func:`usable_name`; ``/`` for the root), or empty when the guest
        gave none that is usable.
    :ivar mode: the source's permission bits (0 to 07777).
    :ivar size: bytes that follow for a non-empty binary file (:func:`usable_size`), else ``None``; the
        content is then exactly that many bytes (:class:`IDownload`).
    :raises ValueError: for any other value.
    """

    type: str = field(validator=_check_type)
    name: str = field(validator=_check_name)
    mode: int = field(validator=_check_mode)
    size: int | None = field(validator=_check_size)


class IDownload(IPushProducer):
    """
    A copy out of the guest in progress, and the push producer of its content:
    pausing it withholds credit from the guest, which stops its reads.
    """

    head = Attribute("A Deferred firing with the DownloadHead, or failing with an AgentError.")
    done = Attribute(
        "A Deferred firing once all content was delivered, or failing with an AgentError of kind INTERRUPTED; "
        "when the head gave a size, it fails unless exactly that many bytes were delivered (no more are)."
    )

    def deliver_to(write: Callable[[bytes], None]) -> None:
        """Send the content to ``write`` from now on (what arrived already first)."""

    def abort() -> None:
        """Stop the copy (the guest stops); :attr:`done` is left unfired."""


@frozen
class FsDetails:
    """
    What an entry with details adds (the guest's ``details``): who owns it,
    where a symlink leads, its metadata.

    :ivar uid: its owner's user id.
    :ivar gid: its group id.
    :ivar owner: its owner's name (the number as text when the guest has none).
    :ivar group: its group's name, likewise.
    :ivar symlink_target: for a symlink, the path it resolves to (its own
        when it does not resolve); else ``None``.
    :ivar target_type: for a symlink that resolves, the type of what it
        resolves to (as :attr:`FsEntry.type`); else ``None``.
    :ivar target_mode: its permission bits, likewise.
    :ivar metadata: the entry's ``user.e2b.<key>`` extended attributes, as
        ``(key, value)`` pairs sorted by key.
    """

    uid: int
    gid: int
    owner: str
    group: str
    symlink_target: str | None = None
    target_type: str | None = None
    target_mode: int | None = None
    metadata: tuple[tuple[str, str], ...] = ()


@frozen
class FsEntry:
    """
    One file-system entry as the guest saw it (``lstat``: a symlink is itself).

    :ivar name: the base name (``/`` for the root); bytes that are not UTF-8
        arrive as U+FFFD.
    :ivar type: ``file``, ``directory``, ``symlink``, ``char_device``,
        ``block_device``, ``fifo``, ``socket`` or ``other``.
    :ivar size: ``st_size`` in bytes.
    :ivar mtime_ns: modification time, integer nanoseconds since the Unix epoch.
    :ivar mode: permission bits including setuid, setgid and sticky.
    :ivar details: its owner, symlink target and metadata when asked for
        (``IGuest.stat(path, details=True)`` and the like), else ``None``.
    """

    name: str
    type: str
    size: int
    mtime_ns: int
    mode: int
    details: FsDetails | None = None
