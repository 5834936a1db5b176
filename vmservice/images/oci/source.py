# -*- test-case-name: tests.images.oci.test_manifests -*-
"""
A container image's source as files: an OCI layout directory or a tar file (of a layout or of
``docker save``), read by paths relative to its top (:class:`ImageSource`).  Paths that climb out of a
directory are refused; links inside a tar file are followed within it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from contextlib import contextmanager
from typing import IO, Iterator

from .errors import OciError
from .paths import SYMLINK_HOPS


class ImageSource:
    """
    An OCI layout directory or a tar file, read by paths relative to its top (``index.json``,
    ``blobs/sha256/<hex>``, ``<id>/layer.tar``).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._tar: tarfile.TarFile | None = None
        self._members: dict[str, tarfile.TarInfo] = {}
        if os.path.isdir(path):
            return
        try:
            self._tar = tarfile.open(path, "r:*")
        except (OSError, tarfile.TarError) as error:
            raise OciError(f"{path} is neither an OCI layout directory nor a tar file: {error}") from None
        for member in self._tar.getmembers():
            self._members[_normal_name(member.name)] = member

    def close(self) -> None:
        """Close the tar file, if any."""
        if self._tar is not None:
            self._tar.close()

    def exists(self, relative: str) -> bool:
        """Whether ``relative`` is a file of the source."""
        if self._tar is None:
            return os.path.isfile(self._local(relative))
        return self._member(relative) is not None

    def _local(self, relative: str) -> str:
        """The host path of ``relative`` in a layout directory, refused when it climbs out."""
        parts = _normal_name(relative).split("/")
        if ".." in parts or not relative:
            raise OciError(f"{self.path}: refusing the path {relative!r}")
        return os.path.join(self.path, *parts)

    def _member(self, relative: str) -> tarfile.TarInfo | None:
        """The member of the tar file at ``relative``, links followed within the tar file; ``None`` when missing."""
        member = self._members.get(_normal_name(relative))
        for _ in range(SYMLINK_HOPS):
            if member is None or not (member.issym() or member.islnk()):
                return member
            target = member.linkname if member.islnk() else os.path.normpath(
                os.path.join(os.path.dirname(_normal_name(member.name)), member.linkname))
            member = self._members.get(_normal_name(target))
        return None

    @contextmanager
    def open(self, relative: str) -> Iterator[IO[bytes]]:
        """The content of file ``relative``, as a seekable binary stream."""
        if self._tar is None:
            try:
                stream: IO[bytes] = open(self._local(relative), "rb")
            except OSError as error:
                raise OciError(f"{self.path}: cannot read {relative}: {error.strerror}") from None
        else:
            member = self._member(relative)
            extracted = self._tar.extractfile(member) if member is not None and member.isfile() else None
            if extracted is None:
                raise OciError(f"{self.path}: {relative} is missing")
            stream = extracted
        with stream:
            yield stream

    def read_json(self, relative: str, digest: str | None = None) -> object:
        """Parse file ``relative`` as JSON, after checking it against ``digest`` when given."""
        with self.open(relative) as stream:
            data = stream.read()
        if digest is not None:
            check_digest(data, digest, relative)
        try:
            return json.loads(data)
        except ValueError as error:
            raise OciError(f"{self.path}: {relative} is not JSON: {error}") from None

    def verify(self, relative: str, digest: str) -> None:
        """Check file ``relative`` against ``digest`` (``sha256:<hex>``) by reading it through."""
        hasher = hashlib.sha256()
        with self.open(relative) as stream:
            for chunk in iter(lambda: stream.read(1024 * 1024), b""):
                hasher.update(chunk)
        if f"sha256:{hasher.hexdigest()}" != digest:
            raise OciError(f"{self.path}: {relative} does not match its digest {digest}")


def _normal_name(name: str) -> str:
    """``name`` with its empty and ``.`` components left out, ``\\`` read as ``/``."""
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    return "/".join(parts)


def check_digest(data: bytes, digest: str, what: str) -> None:
    """Raise :class:`OciError` unless ``data`` has the digest ``digest`` (``sha256:<hex>``)."""
    if f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
        raise OciError(f"{what} does not match its digest {digest}")


__all__ = ["ImageSource", "check_digest"]
