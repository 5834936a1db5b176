# -*- test-case-name: tests.guest.test_copying,tests.integration.guest.test_copying -*-
"""
The copy operations' streams: each runs its copy on a worker thread behind a
:class:`~vmservice.guest.copying.bridge.Bridge` and moves the output to the
stream within the host's credit.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Mapping, Optional

from vmservice.guest.streams import GuestStream, StreamHandler
from vmservice.guest.bulk_upload import PortReader
from vmservice.guest.bulkport import BulkClosed, BulkPort, Stop
import vmservice.guest.copying.downloading as downloading
from vmservice.guest.copying.binary_upload import upload_file, upload_file_v1
from vmservice.guest.copying.bridge import Bridge
from vmservice.guest.copying.errors import Cancelled, CopyFailed, error_reply, os_error
from vmservice.guest.copying.fields import home_path, read_header
from vmservice.guest.copying.tar_upload import upload_tar, upload_tar_v1
from vmservice.guest.filesystem import FsError
from vmservice.wire.bulk import MAX_END, decode_upload_end, parse_token
from vmservice.wire.excludes import Excludes
from vmservice.wire.openheaders.copy import DownloadHeader, UploadHeader
from vmservice.wire.errors import ResetCode
from vmservice.wire.payloads import encode_head

#: ... and the loop stops moving output to the stream beyond this much pending.
PENDING_HIGH_WATER = 256 * 1024


class _Refused(Exception):
    """The copy cannot take the bulk port: the stream is reset with ``REFUSED`` (the host copies without it)."""


class _CopyHandler(StreamHandler):
    """
    Runs :meth:`work` on a thread behind a :class:`Bridge` and moves its
    output to the stream within the host's credit; ends the stream when the
    work is done (RESET when it failed after output began).

    :ivar _stop: wakes or stops a worker blocked on the bulk port (copies
        that offer it only).
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._bridge = Bridge()
        self._ended = False
        self._pumping = False
        self._token = parse_token(header.get("bulk"))
        self._stop: Optional[Stop] = Stop() if self._token is not None else None

    def work(self, bridge: Bridge) -> None:
        """The copy itself, on the worker thread."""
        raise NotImplementedError

    def start(self) -> None:
        self.stream.loop.watch(self._bridge.wake_r, self._woken)
        worker = threading.Thread(target=self._run, name=f"cp-{self.stream.stream_id}", daemon=True)
        worker.start()

    def _run(self) -> None:
        failure: Optional[str] = None
        code: int = ResetCode.INTERNAL_ERROR
        try:
            self.work(self._bridge)
        except Cancelled:
            pass
        except _Refused as e:
            failure, code = str(e), ResetCode.REFUSED
        except BulkClosed as e:
            stop = self._stop
            if stop is None or not stop.stopped:
                failure = str(e)[:500]
            elif stop.reason is not None:
                failure, code = stop.reason, ResetCode.PROTOCOL_ERROR
        except Exception as e:
            failure = str(e)[:500] or repr(e)[:500]
        self._bridge.finish(failure, code)

    def data_received(self, data: bytes) -> None:
        if not self._bridge.feed(data):
            self.stream.consumed(len(data))

    def half_closed(self) -> None:
        self._bridge.feed_eof()

    def flushed(self) -> None:
        self._pump()

    def reset(self, code: int, reason: str) -> None:
        self._ended = True
        self._bridge.cancel()
        if self._stop is not None:
            self._stop.stop()
        if self._bridge.finished:
            self._close()

    def _close(self) -> None:
        self.stream.loop.watch(self._bridge.wake_r)
        self._bridge.close()
        if self._stop is not None:
            self._stop.close()

    def _woken(self) -> None:
        bridge = self._bridge
        bridge.woken()
        consumed = bridge.take_consumed()
        if consumed:
            self.stream.consumed(consumed)
        if self._ended:
            if bridge.finished:
                self._close()
            return
        self._pump()

    def _pump(self) -> None:
        if self._pumping or self._ended:
            return
        self._pumping = True
        try:
            bridge = self._bridge
            while self.stream.pending < PENDING_HIGH_WATER:
                chunk = bridge.take_output()
                if chunk is None:
                    break
                self.stream.write(chunk)
            if bridge.drained:
                self._ended = True
                self._close()
                if bridge.failure is not None:
                    self.stream.reset(bridge.code, bridge.failure[:200])
                else:
                    self.stream.end()
        finally:
            self._pumping = False


class UploadHandler(_CopyHandler):
    """``{"op": "cp-upload", ...}``: see :mod:`vmservice.guest.copying`."""

    def work(self, bridge: Bridge) -> None:
        self.respond(bridge, bridge.read, lambda: bridge.received)

    def respond(self, bridge: Bridge, read: Callable[[int], bytes], received: Callable[[], int],
                fill: Optional[Callable[[int], int]] = None) -> None:
        """
        Make the copy of the body that ``read`` gives (a binary one: that
        ``fill`` writes to the file, when given), and write the reply.
        """
        header = self.header
        try:
            asked = read_header(UploadHeader, header)
            mode, uid, gid, permissions = asked.mode, asked.uid, asked.gid, asked.permissions
            path, excludes, unpacked = home_path(asked.path, uid), Excludes(asked.exclude), asked.unpacked_size
            if asked.semantics == "cp-v1":
                name = asked.source_name
                if mode == "binary":
                    result = upload_file_v1(path, name, read, uid, gid, permissions, unpacked, fill)
                else:
                    result = upload_tar_v1(path, name, asked.copy_contents, read, uid, gid,
                                           permissions, excludes, unpacked)
            elif mode == "binary":
                result = upload_file(path, read, uid, gid, permissions, unpacked, fill=fill)
            else:
                result = upload_tar(path, read, uid, gid, permissions, excludes, unpacked)
            result["size"] = received()
            reply: dict[str, Any] = {"ok": True, "result": result}
        except FsError as e:
            reply = error_reply(e)
        except OSError as e:
            reply = error_reply(os_error(e, getattr(e, "filename", None) or str(header.get("path"))))
        bridge.write(json.dumps(reply, separators=(",", ":")).encode("utf-8"))


class BulkUploadHandler(UploadHandler):
    """
    ``{"op": "cp-upload-bulk", ..., "bulk": TOKEN}``: a binary upload whose
    body comes on the bulk port (``docs/agent-protocol.md``).  The agent
    answers a head ``{"ok": true, "bulk": true}`` once it holds the port (or
    resets the stream with ``REFUSED``: the host then sends a ``cp-upload``),
    reads the token and the body from the port, and learns the body's size
    from the stream (``{"size": N}`` and HALF_CLOSE); then the reply as for
    ``cp-upload``.
    """

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._end = b""
        self._reader: Optional[PortReader] = None
        self._total: Optional[int] = None

    def work(self, bridge: Bridge) -> None:
        token, stop = self._token, self._stop
        if token is None or stop is None:
            raise _Refused("a bulk upload needs a token")
        port = BulkPort.claim(stop)
        if port is None:
            raise _Refused("the bulk port is busy or missing")
        try:
            bridge.write(encode_head({"ok": True, "bulk": True}))
            reader = PortReader(port, port.expect(token))
            self._reader = reader
            reader.total = self._total
            self.respond(bridge, reader.read, lambda: reader.received, reader.fill)
        finally:
            port.release()

    def data_received(self, data: bytes) -> None:
        self.stream.consumed(len(data))
        self._end += data
        if len(self._end) > MAX_END and self._stop is not None:
            self._stop.stop("the end of a bulk upload is too long")

    def half_closed(self) -> None:
        if self._stop is None or self._stop.stopped:
            return
        try:
            total = decode_upload_end(self._end)
        except ValueError as e:
            self._stop.stop(f"bad end of a bulk upload: {e}")
            return
        self._total = total
        if self._reader is not None:
            self._reader.total = total
        self._stop.wake()


class DownloadHandler(_CopyHandler):
    """``{"op": "cp-download", ...}``: see :mod:`vmservice.guest.copying`."""

    def work(self, bridge: Bridge) -> None:
        header = self.header
        try:
            asked = read_header(DownloadHeader, header)
            mode, semantics, excludes = asked.mode, asked.semantics, Excludes(asked.exclude)
            path = home_path(asked.path, asked.uid)
        except FsError as e:
            bridge.write(encode_head(error_reply(e)))
            return
        bulk = self._send_bulk if self._token is not None else None
        downloading.download(path, mode, bridge.write, semantics, excludes, bulk)

    def _send_bulk(self, head: dict[str, Any], path: str, fd: int, size: int) -> bool:
        """
        Send file ``fd`` on the bulk port, with ``head`` first on the stream;
        ``False`` when the port is busy or missing (nothing was written).
        """
        token, stop = self._token, self._stop
        assert token is not None and stop is not None
        port = BulkPort.claim(stop)
        if port is None:
            return False
        try:
            self._bridge.write(encode_head({"ok": True, "result": {**head, "bulk": True}}))
            port.expect(token)
            port.write_all(token)
            sent = port.send_file(path, fd, size)
        finally:
            port.release()
        if sent != size:
            raise CopyFailed(f"the file shrank from {size} to {sent} bytes while it was read")
        return True


__all__ = ["PENDING_HIGH_WATER", "BulkUploadHandler", "DownloadHandler", "UploadHandler"]
