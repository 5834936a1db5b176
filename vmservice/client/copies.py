# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
Copies in and out of a node (``/vm/{hostname}/cp``): uploads streamed from a
file, a pipe or a producer, downloads handed to a ``write`` callback chunk by
chunk, and what a download's headers said (:class:`Download`).
"""

from __future__ import annotations

import base64
import binascii
from typing import IO, Any, Callable, Sequence

import treq
from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web.iweb import IBodyProducer, IResponse

from .requests import Requests, _octal, _path

__all__ = ["CP_V1_MODES", "CopyCalls", "Download"]


@frozen
class Download:
    """
    What a download's headers said, answered once its body has been written.

    :ivar mode: the file's permission bits from ``X-Service-File-Mode``
        (binary mode), or ``None`` when the daemon sent none.
    :ivar length: the body's length when the daemon announced it.
    :ivar content_type: the body's type (``application/octet-stream`` or
        ``application/x-tar``).
    :ivar source_type: ``file`` or ``directory`` (``X-Slicer-Source-Type``),
        ``None`` when the daemon sent none.
    :ivar source_name: the source's base name (``X-Slicer-Source-Name-Base64``,
        decoded), ``None`` when the daemon sent none (for ``/``).
    """

    mode: int | None
    length: int | None
    content_type: str | None
    source_type: str | None = None
    source_name: str | None = None

    @property
    def tar(self) -> bool:
        """Whether the body is a tar stream (else a file's bytes)."""
        return self.content_type == "application/x-tar"


def _download_info(response: IResponse) -> Download:
    """The :class:`Download` a response's headers describe."""

    def header(name: bytes) -> str | None:
        raw = response.headers.getRawHeaders(name, [None])[0]
        return raw.decode("latin-1") if isinstance(raw, bytes) else raw

    file_mode, encoded = header(b"x-service-file-mode"), header(b"x-slicer-source-name-base64")
    try:
        parsed = int(file_mode, 8) if file_mode else None
    except ValueError:
        parsed = None
    name = None
    if encoded:
        try:
            name = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8", "surrogateescape")
        except (binascii.Error, ValueError):
            name = None
    length = response.length if isinstance(response.length, int) else None
    return Download(parsed, length, header(b"content-type"), header(b"x-slicer-source-type"), name)


#: The copy modes that place a copy like ``cp`` (see ``docs/api.md``).
CP_V1_MODES = ("cp-v1-binary", "cp-v1-tar", "cp-v1-recursive")


class _Abandon(Protocol):
    """Takes a response body nobody wants: drops the connection at once, fires ``done`` when it is gone."""

    def __init__(self) -> None:
        self.done: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        IPushProducer(self.transport).stopProducing()

    def connectionLost(self, reason: Failure = Failure(ConnectionDone())) -> None:
        self.done.callback(None)



class CopyCalls(Requests):
    """
    Copies both ways.
    """

    async def upload(
        self,
        hostname: str,
        path: str,
        body: IBodyProducer | IO[bytes] | bytes,
        *,
        mode: str = "binary",
        uid: int | None = None,
        gid: int | None = None,
        permissions: int | str | None = None,
        source_name: str | None = None,
        source_type: str | None = None,
        copy_contents: bool = False,
        exclude: Sequence[str] = (),
        unpacked_size: int | None = None,
    ) -> None:
        """
        Copy into node ``hostname`` (``POST /vm/{hostname}/cp``), streaming
        ``body`` as it is read: nothing is held in memory.

        :param path: the destination in the guest: with ``binary`` and
            ``tar``, the file, or the directory the tar is extracted under;
            with the ``cp-v1-*`` modes, the destination as ``cp`` reads it
            (an existing directory receives ``source_name``).
        :param body: the file's bytes or an uncompressed tar stream: bytes, a
            file object (a pipe is sent chunked, see :func:`body_producer`)
            or a producer.
        :param mode: ``"binary"``, ``"tar"``, ``"cp-v1-binary"`` or ``"cp-v1-tar"``.
        :param uid: the owner to give what is written (and whose ``~`` it is).
        :param gid: the group to give what is written.
        :param permissions: the file's mode (``0o644`` or ``"0644"``).
        :param source_name: cp-v1: the base name of what is copied.
        :param source_type: cp-v1: ``file`` or ``directory`` (by default the mode's).
        :param copy_contents: cp-v1: a directory's contents go into (merge with) ``path``.
        :param exclude: patterns of tar entries the guest leaves out.
        :param unpacked_size: the bytes the upload unpacks to: the guest
            refuses it (507) before writing anything when they do not fit.
        :raise ApiError: the daemon refused (404 unknown node, 400 bad path,
            409 paused, 503 no agent, 507 no room...).
        """
        tar = mode in ("tar", "cp-v1-tar") or source_type == "directory"
        params: dict[str, Any] = {"path": path, "mode": mode, "uid": uid, "gid": gid,
                                  "permissions": _octal(permissions)}
        if mode in CP_V1_MODES:
            params.update(copy_semantics="cp-v1", source_name=source_name,
                          source_type=source_type or ("directory" if tar else "file"),
                          copy_contents=copy_contents or None)
        params["exclude"] = list(exclude)
        headers = {b"Content-Type": b"application/x-tar" if tar else b"application/octet-stream"}
        if unpacked_size is not None:
            headers[b"X-Slicer-Unpacked-Size"] = str(unpacked_size).encode("ascii")
        response = await self._send(
            "POST",
            _path("vm", hostname, "cp"),
            params,
            data=self._producer(body) if not isinstance(body, bytes) else body,
            headers=headers,
        )
        await treq.content(response)

    async def download(
        self,
        hostname: str,
        path: str,
        *,
        write: Callable[[bytes], None] | None = None,
        sink: Callable[[Download], Callable[[bytes], None]] | None = None,
        mode: str = "binary",
        exclude: Sequence[str] = (),
        uid: int | None = None,
    ) -> Download:
        """
        Copy out of node ``hostname`` (``GET /vm/{hostname}/cp``), handing
        each chunk to ``write`` as it arrives (a slow ``write`` slows the
        transfer rather than growing memory).

        :param path: the file (binary) or the file or directory (tar).
        :param write: called with each chunk of the file or tar stream; an
            exception it raises ends the transfer and is raised here.
        :param sink: instead of ``write``: called once the headers are in
            (with what they say: a file's bytes or a tar, the source's type
            and name), answers the ``write`` for the body; an exception it
            raises drops the connection and is raised here.
        :param mode: ``"binary"``, ``"tar"``, ``"cp-v1-binary"``,
            ``"cp-v1-tar"`` or ``"cp-v1-recursive"`` (a file's bytes or a
            directory's tar, as the source is).
        :param exclude: patterns of entries the guest leaves out of a tar.
        :param uid: whose home directory ``~`` is in ``path``.
        :return: the file mode, length, type and name the daemon announced.
        :raise ApiError: 404 no such path, 400 a directory in binary mode, ...
        """
        if mode == "cp-v1-recursive":
            accept = b"application/octet-stream, application/x-tar"
        elif mode in ("tar", "cp-v1-tar"):
            accept = b"application/x-tar"
        else:
            accept = b"application/octet-stream"
        params: dict[str, Any] = {"path": path, "mode": mode}
        if mode in CP_V1_MODES:
            params["copy_semantics"] = "cp-v1"
        params.update(exclude=list(exclude), uid=uid)
        response = await self._send("GET", _path("vm", hostname, "cp"), params, headers={b"Accept": accept})
        info = _download_info(response)
        if write is None:
            if sink is None:
                raise TypeError("download() needs write or sink")
            try:
                write = sink(info)
            except BaseException:
                abandon = _Abandon()
                response.deliverBody(abandon)
                await abandon.done
                raise
        await treq.collect(response, write)
        return info
