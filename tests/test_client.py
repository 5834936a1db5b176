# -*- test-case-name: tests.test_client -*-
"""
Tests for :mod:`vmservice.client` without a server: the address rule, error
bodies, query parameters and paths, the decoding of exec streams, and which
body producer a source gets.  The client against the API app served on
loopback is tested in :mod:`tests.integration.test_client`.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.pipes import Pipes
from vmservice.client import (
    ApiError,
    ExecInterrupted,
    ExecRecord,
    FdBodyProducer,
    NdjsonDecoder,
    SseDecoder,
    body_producer,
    decode_exec_record,
    is_unix_socket,
    socket_path,
)
from vmservice.client.requests import _params, _path


class PureTests(SynchronousTestCase):
    def test_socket_rule(self) -> None:
        """Socket addresses follow the shared rule: / ./ ../ ~/ unix:// prefixes or a .sock ending."""
        for url in ("/run/v.sock", "./a", "../a", "~/a", "unix:///run/x", "api.sock", "unix://rel"):
            self.assertTrue(is_unix_socket(url), url)
        for url in ("http://127.0.0.1:8080", "https://h:1/", "127.0.0.1:8080", "sock", "http://h/x.sock.d"):
            self.assertFalse(is_unix_socket(url), url)

    def test_socket_path(self) -> None:
        """``unix://`` is stripped and ``~`` expanded to the home directory."""
        self.assertEqual(socket_path("unix:///run/v.sock"), "/run/v.sock")
        self.assertEqual(socket_path("./v.sock"), "./v.sock")
        self.assertFalse(socket_path("~/v.sock").startswith("~"))

    @given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
    def test_unix_prefix_always_socket(self, rest: str) -> None:
        """Anything behind ``unix://`` is a socket, and its path is exactly what follows."""
        self.assertTrue(is_unix_socket("unix://" + rest))
        if not rest.startswith("~"):
            self.assertEqual(socket_path("unix://" + rest), rest)

    @given(st.integers(400, 599), st.text(max_size=40), st.one_of(st.none(), st.text(min_size=1, max_size=20)))
    def test_error_body_round_trip(self, status: int, message: str, code: str | None) -> None:
        """An ErrorResponse body gives back its message and code exactly."""
        body = json.dumps({"error": message, "code": code} if code else {"error": message}).encode()
        error = ApiError.from_body(status, body)
        self.assertEqual((error.status, error.code, error.message), (status, code, message))

    @given(st.integers(400, 599), st.binary(max_size=60))
    def test_any_error_body(self, status: int, body: bytes) -> None:
        """Any body at all gives an ApiError with a non-empty message, never an exception."""
        error = ApiError.from_body(status, body)
        self.assertEqual(error.status, status)
        self.assertTrue(error.message)

    def test_empty_error_body(self) -> None:
        """An empty error body is described by its status phrase."""
        self.assertEqual(ApiError.from_body(404, b"").message, "Not Found")
        self.assertEqual(ApiError.from_body(599, b"").message, "HTTP 599")

    @given(st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4))
    def test_path_segments_quoted(self, segments: list[str]) -> None:
        """Each segment becomes exactly one path segment, whatever characters it holds."""
        from urllib.parse import unquote

        path = _path(*segments)
        self.assertEqual([unquote(part) for part in path.split("/")[1:]], segments)

    def test_params(self) -> None:
        """None values are left out, lists repeat their key and numbers become text."""
        self.assertEqual(
            _params({"a": None, "b": "x", "c": ["1", "2"], "lines": 0}),
            [("b", "x"), ("c", "1"), ("c", "2"), ("lines", "0")],
        )
        self.assertEqual(_params(None), [])


class RecordTests(SynchronousTestCase):
    """The pure decoding of exec streams."""

    @given(st.binary(max_size=200), st.sampled_from(["stdout", "stderr"]))
    def test_base64_payload_exact(self, data: bytes, kind: str) -> None:
        """A base64 payload decodes to exactly the bytes encoded."""
        record = decode_exec_record({"type": kind, "data": base64.b64encode(data).decode(), "encoding": "base64"})
        self.assertEqual((record.type, record.data), (kind, data))

    @given(st.text(max_size=100))
    def test_text_payload(self, text: str) -> None:
        """A text payload becomes its UTF-8 bytes."""
        self.assertEqual(decode_exec_record({"type": "stdout", "data": text}).data, text.encode("utf-8", "surrogatepass"))

    def test_legacy_frames(self) -> None:
        """Untyped frames are read as the typed records they stand for."""
        self.assertEqual(decode_exec_record({"stdout": "hi"}), ExecRecord("stdout", data=b"hi"))
        self.assertEqual(decode_exec_record({"exit_code": 4}).type, "exit")
        self.assertEqual(decode_exec_record({"error": "gone", "exit_code": 127}).type, "error")
        for bad in ([], {}, {"type": "stdout", "data": "!!", "encoding": "base64"}):
            self.assertRaises(ExecInterrupted, decode_exec_record, bad)

    @given(st.lists(st.dictionaries(st.text(max_size=5), st.integers(), max_size=3), max_size=8), st.data())
    def test_ndjson_any_chunking(self, values: list[dict[str, int]], data: Any) -> None:
        """However the stream is cut into chunks, the same values come out in order."""
        stream = b"".join(json.dumps(v).encode() + b"\n" for v in values)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
        decoder = NdjsonDecoder()
        out: list[Any] = []
        for start, end in zip([0] + cuts, cuts + [len(stream)]):
            out += decoder.feed(stream[start:end])
        out += decoder.finish()
        self.assertEqual(out, values)

    def test_ndjson_long_line(self) -> None:
        """A line longer than the limit is an error, not unbounded memory."""
        decoder = NdjsonDecoder(max_line=10)
        self.assertRaises(ValueError, decoder.feed, b"x" * 11)


_event_data = st.fixed_dictionaries({"type": st.sampled_from(["create", "write", "overflow"]),
                                     "path": st.text(max_size=20), "size": st.integers(0, 2**40),
                                     "isDir": st.booleans()})


class SseTests(SynchronousTestCase):
    """The pure decoding of watch streams (Server-Sent Events)."""

    @given(st.lists(st.tuples(_event_data, st.booleans()), max_size=8), st.sampled_from([b"\n", b"\r\n"]), st.data())
    def test_any_chunking(self, items: list[tuple[dict[str, Any], bool]], newline: bytes, data: Any) -> None:
        """
        However the stream is cut, with LF or CRLF line ends and heartbeat comments
        between events, the events come out in order, their ids from the id lines.
        """
        from vmservice.api.sse import HEARTBEAT, sse_event

        stream = b": opened" + newline + newline
        expected = []
        for number, (fields, heartbeat) in enumerate(items, start=7):
            stream += sse_event(number, fields).replace(b"\n", newline)
            if heartbeat:
                stream += HEARTBEAT.replace(b"\n", newline)
            expected.append({**fields, "id": number})
        cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
        decoder = SseDecoder()
        out: list[Any] = []
        for start, end in zip([0] + cuts, cuts + [len(stream)]):
            out += decoder.feed(stream[start:end])
        self.assertEqual(out, expected)

    def test_fields(self) -> None:
        """The JSON's own id wins; data lines join with a newline; event and retry lines are skipped."""
        decoder = SseDecoder()
        self.assertEqual(decoder.feed(b'id: 3\nevent: watch\nretry: 10\ndata: {"id": 9,\ndata:"a":1}\n\n'),
                         [{"id": 9, "a": 1}])
        self.assertEqual(decoder.feed(b'data: {"b":2}\n\n'), [{"b": 2, "id": 3}])
        self.assertEqual(SseDecoder().feed(b'data: {"c":3}\n\n'), [{"c": 3}])

    def test_refused(self) -> None:
        """Data that is not a JSON object, and a line over the limit, are errors."""
        self.assertRaises(ValueError, SseDecoder().feed, b"data: [1]\n\n")
        self.assertRaises(ValueError, SseDecoder().feed, b"data: nope\n\n")
        self.assertRaises(ValueError, SseDecoder(max_line=10).feed, b"data: " + b"x" * 11)


class BodyProducerTests(Pipes, SynchronousTestCase):
    """:func:`body_producer` on a real pipe and files, with a reactor that is never run."""

    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()

    def test_body_producer_choice(self) -> None:
        """A pipe gets an FdBodyProducer; a regular file or BytesIO a producer of known length."""
        import io

        read_end, _ = self.pipe()
        self.assertIsInstance(body_producer(self.reactor, os.fdopen(read_end, "rb", closefd=False)), FdBodyProducer)
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"12345")
        with open(path, "rb") as f:
            self.assertEqual(body_producer(self.reactor, f).length, 5)
        self.assertEqual(body_producer(self.reactor, io.BytesIO(b"abc")).length, 3)
