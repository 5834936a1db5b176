# -*- test-case-name: tests.integration.guest.test_copying -*-
"""
Tests for :mod:`vmservice.guest.copying`: both handlers served by a real
:class:`~vmservice.guest.agent.Session` and :class:`~vmservice.guest.agent.Loop`,
their work on real threads (flow control, resets, concurrency).  The copy
functions themselves are tested in :mod:`tests.guest.test_copying`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from typing import Any, Callable

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from tests.guest.tars import make_tar
from vmservice.guest import health
from vmservice.guest import copying as cp
from vmservice.guest.copying import downloading
from vmservice.wire import payloads
from vmservice.wire import Data, HalfClose, Open, Reset, ResetCode


def _temp_dir(case: SynchronousTestCase) -> str:
    path = tempfile.mkdtemp(prefix="vmscp-", dir="/tmp")
    case.addCleanup(shutil.rmtree, path, True)
    return path


class HandlerTests(GuestSessionMixin, SynchronousTestCase):
    """Both handlers behind the agent's real session and loop."""

    def setUp(self) -> None:
        self.root = _temp_dir(self)
        self.start_session({"cp-upload": cp.UploadHandler, "cp-download": cp.DownloadHandler})
        self.handshake()

    def run_stream(self, stream_id: int, body: bytes = b"", acknowledge: bool = True,
                   timeout: float = 20.0) -> tuple[bytes, str]:
        """
        Send ``body`` within the guest's credit, half-close, and collect what
        comes back until HALF_CLOSE ("end") or RESET ("reset").
        """
        out = bytearray()
        offset = 0
        sent_eof = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            window = self.host.send_window(stream_id) if self.host.is_open(stream_id) else 0
            if offset < len(body) and window > 0:
                size = min(window, len(body) - offset, 65536)
                self.send(Data(stream_id, body[offset:offset + size]))
                offset += size
                continue
            if offset >= len(body) and not sent_eof and self.host.can_send(stream_id):
                self.send(HalfClose(stream_id))
                sent_eof = True
            for event in self.receive():
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                if isinstance(event, Data):
                    out += event.data
                    if acknowledge:
                        self.session.data_received(self.host.acknowledge_received_data(stream_id, len(event.data)))
                elif isinstance(event, HalfClose):
                    return bytes(out), "end"
                elif isinstance(event, Reset):
                    return bytes(out), "reset"
            self.loop.run_once(0.02)
        raise AssertionError(f"stream {stream_id} did not end: {bytes(out[:200])!r}")

    def open(self, **header: Any) -> int:
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, header))
        return stream_id

    def test_upload_binary(self) -> None:
        """A 2 MiB body (8 windows of credit) lands whole; the reply says where and how much."""
        data = os.urandom(2 << 20)
        path = os.path.join(self.root, "big")
        stream_id = self.open(op="cp-upload", path=path, mode="binary", permissions=0o600)
        out, how = self.run_stream(stream_id, data)
        self.assertEqual(how, "end")
        self.assertEqual(json.loads(out), {"ok": True, "result": {"path": path, "size": 2 << 20}})
        with open(path, "rb") as f:
            self.assertEqual(f.read(), data)

    def test_upload_refused_early(self) -> None:
        """An unsafe entry is answered before the body ends; the rest is acknowledged, not stuck."""
        body = make_tar([("/abs", b"x")]) + b"\0" * (1 << 20)
        stream_id = self.open(op="cp-upload", path=os.path.join(self.root, "d"), mode="tar")
        out, how = self.run_stream(stream_id, body)
        self.assertEqual((json.loads(out)["error"], how), ("unsafe_entry", "end"))

    def test_upload_reset_removes_partial(self) -> None:
        """A reset before the body ended removes the partial file and never replaces the old one."""
        path = os.path.join(self.root, "f")
        with open(path, "wb") as f:
            f.write(b"old")
        stream_id = self.open(op="cp-upload", path=path)
        self.send(Data(stream_id, b"partial"))
        for _ in range(10):
            self.loop.run_once(0.02)
        self.send(Reset(stream_id, ResetCode.CANCEL, "client went away"))
        deadline = time.monotonic() + 5
        while len(os.listdir(self.root)) > 1 and time.monotonic() < deadline:
            self.loop.run_once(0.02)
        self.assertEqual(os.listdir(self.root), ["f"])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"old")

    def test_cp_v1_upload_lands_by_name(self) -> None:
        """A cp-v1 header places the upload: a tar into an existing directory lands under its source name."""
        body = make_tar([("f", b"x")])
        stream_id = self.open(op="cp-upload", path=self.root, mode="tar", semantics="cp-v1", source_name="src",
                              copy_contents=False, exclude=["nothing"], unpacked_size=len(body))
        out, how = self.run_stream(stream_id, body)
        self.assertEqual((how, json.loads(out)["result"]["path"]), ("end", os.path.join(self.root, "src")))
        self.assertEqual(os.listdir(self.root), ["src"])

    def test_cp_v1_reset_leaves_nothing(self) -> None:
        """A cp-v1 tar upload reset mid-body leaves neither the new directory nor its staging."""
        target = os.path.join(self.root, "p", "new")
        stream_id = self.open(op="cp-upload", path=target, mode="tar", semantics="cp-v1", source_name="new")
        self.send(Data(stream_id, make_tar([("a", b"1" * 5000), ("b", b"2" * 70_000)])[:40_000]))
        deadline = time.monotonic() + 5
        parent = os.path.join(self.root, "p")
        while not (os.path.isdir(parent) and os.listdir(parent)) and time.monotonic() < deadline:
            self.loop.run_once(0.02)
        self.assertEqual(os.listdir(self.root), ["p"])  # the parent and the staging directory in it are made
        self.assertEqual(len(os.listdir(parent)), 1)
        self.send(Reset(stream_id, ResetCode.CANCEL, "client went away"))
        deadline = time.monotonic() + 5
        while os.listdir(self.root) and time.monotonic() < deadline:
            self.loop.run_once(0.02)
        self.assertEqual(os.listdir(self.root), [])

    def test_no_space_answered_before_the_body(self) -> None:
        """An unpacked size beyond the free space is answered at once; the body is acknowledged and dropped."""
        status = os.statvfs(self.root)
        stream_id = self.open(op="cp-upload", path=os.path.join(self.root, "d"), mode="tar", semantics="cp-v1",
                              source_name="d", unpacked_size=status.f_bavail * status.f_frsize)
        out, how = self.run_stream(stream_id, b"\0" * (1 << 20))
        self.assertEqual((json.loads(out)["error"], how), ("no_space", "end"))
        self.assertEqual(os.listdir(self.root), [])

    def test_bad_header(self) -> None:
        """A bad mode or relative path is an error reply (the API's 400)."""
        for header in ({"path": "/x", "mode": "cp-v1-binary"}, {"path": "relative"}, {"path": "/x", "uid": "0"},
                       {"path": "/x", "semantics": "cp-v2"}, {"path": "/x", "exclude": "*"},
                       {"path": "/x", "unpacked_size": -1}, {"path": "/x", "semantics": "cp-v1", "source_name": "a/b"}):
            stream_id = self.open(op="cp-upload", **header)
            out, _ = self.run_stream(stream_id)
            self.assertEqual(json.loads(out)["error"], "invalid", header)

    def test_download_binary_with_flow_control(self) -> None:
        """A download withheld credit stops after about a window; acknowledging lets the rest come."""
        data = os.urandom(3 << 20)
        path = os.path.join(self.root, "src")
        with open(path, "wb") as f:
            f.write(data)
        stream_id = self.open(op="cp-download", path=path, mode="binary")
        self.send(HalfClose(stream_id))
        first = bytearray()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            self.loop.run_once(0.02)
            first += b"".join(e.data for e in self.receive() if isinstance(e, Data))
        received = len(first)
        self.assertLessEqual(received, 256 * 1024)
        handler = self.session.streams[stream_id].handler
        self.assertLessEqual(handler._bridge._out_size, cp.BRIDGE_HIGH_WATER + cp.CHUNK)
        self.session.data_received(self.host.acknowledge_received_data(stream_id, received))
        rest, how = self.run_stream(stream_id)
        decoded = payloads.decode_head(bytes(first) + rest)
        assert decoded is not None
        head, used = decoded
        self.assertEqual((how, head["result"]["size"]), ("end", 3 << 20))
        self.assertEqual((bytes(first) + rest)[used:], data)

    def test_download_error_head(self) -> None:
        """A missing path is an error head, then HALF_CLOSE."""
        stream_id = self.open(op="cp-download", path=os.path.join(self.root, "none"), mode="tar")
        out, how = self.run_stream(stream_id)
        decoded = payloads.decode_head(out)
        assert decoded is not None
        self.assertEqual((decoded[0]["error"], how), ("not_found", "end"))

    def test_download_failure_resets(self) -> None:
        """A failure after the head resets the stream with INTERNAL_ERROR."""
        def failing(path: str, mode: str, write: Callable[[bytes], None], *options: object) -> None:
            write(payloads.encode_head({"ok": True, "result": {}}))
            raise cp.CopyFailed("disk on fire")

        self.patch(downloading, "download", failing)
        stream_id = self.open(op="cp-download", path="/", mode="binary")
        self.send(HalfClose(stream_id))
        _, how = self.run_stream(stream_id)
        self.assertEqual(how, "reset")

    def test_streams_move_while_copy_blocks(self) -> None:
        """While a download's worker is blocked, a health stream is answered."""
        release = threading.Event()
        self.addCleanup(release.set)

        def slow(path: str, mode: str, write: Callable[[bytes], None], *options: object) -> None:
            release.wait(10)
            write(payloads.encode_head({"ok": True, "result": {}}))

        self.patch(downloading, "download", slow)
        self.patch(health, "system_uptime_ns", lambda path: 1)
        busy = self.open(op="cp-download", path="/", mode="binary")
        quick = self.open(op="health")
        self.send(HalfClose(quick))
        _, how = self.run_stream(quick)
        self.assertEqual(how, "end")
        release.set()
        _, how = self.run_stream(busy)
        self.assertEqual(how, "end")
