"""
Tests for :mod:`vmservice.e2b.multipart`: bodies read whole however they
are cut into chunks (properties), the SDK's own encoding, and the bounds.
"""

from __future__ import annotations

from typing import Any

import httpx
from hypothesis import given, settings, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.e2b.multipart import (MAX_PART_HEAD, MAX_PARTS, MultipartError, MultipartReader, PartHead,
                                     boundary_of, part_head)

BOUNDARY = b"x-boundary-1234"


class Collected:
    def __init__(self) -> None:
        self.parts: list[list[Any]] = []

    def part(self, head: PartHead) -> None:
        self.parts.append([head, b"", False])

    def data(self, data: bytes) -> None:
        assert not self.parts[-1][2]
        self.parts[-1][1] += data

    def part_end(self) -> None:
        self.parts[-1][2] = True


def encode(parts: list[tuple[str, bytes]], boundary: bytes = BOUNDARY) -> bytes:
    body = b"preamble\r\n"
    for filename, content in parts:
        body += (b"--" + boundary + b"\r\nContent-Disposition: form-data; name=\"file\"; filename=\""
                 + filename.encode() + b"\"\r\nContent-Type: application/octet-stream\r\n\r\n" + content + b"\r\n")
    return body + b"--" + boundary + b"--\r\nepilogue"


def read(body: bytes, cuts: list[int], boundary: bytes = BOUNDARY) -> Collected:
    collected = Collected()
    reader = MultipartReader(boundary, collected)
    start = 0
    for cut in sorted(set(cuts)) + [len(body)]:
        reader.feed(body[start:cut])
        start = cut
    reader.end()
    return collected


names = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters='"\\%'), min_size=1,
                max_size=40)
contents = st.binary(max_size=300) | st.sampled_from([b"\r\n--", b"\r\n--" + BOUNDARY[:-1], b"--" + BOUNDARY])


class ReaderTests(SynchronousTestCase):
    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(names, contents), min_size=1, max_size=5), st.lists(st.integers(0, 4000)))
    def test_any_chunking(self, parts: list[tuple[str, bytes]], cuts: list[int]) -> None:
        body = encode(parts)
        collected = read(body, [cut % (len(body) + 1) for cut in cuts])
        self.assertEqual([(head.filename, data, ended) for head, data, ended in collected.parts],
                         [(name, content, True) for name, content in parts])

    def test_sdk_encoding(self) -> None:
        request = httpx.Request("POST", "http://h/files", files=[
            ("file", ("/home/user/a b.txt", b"one", "application/octet-stream")),
            ("file", ("rel/two", b"\x00two\r\n", "application/octet-stream"))])
        content_type = request.headers["content-type"].encode()
        body = request.read()
        collected = read(body, [], boundary_of(content_type))
        self.assertEqual([(head.name, head.filename, data) for head, data, _ in collected.parts],
                         [("file", "/home/user/a b.txt", b"one"), ("file", "rel/two", b"\x00two\r\n")])

    def test_first_delimiter_opens_body(self) -> None:
        body = b"--" + BOUNDARY + b"\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--" + BOUNDARY + b"--"
        self.assertEqual(read(body, [3]).parts[0][1:], [b"v", True])

    def test_unterminated(self) -> None:
        reader = MultipartReader(BOUNDARY, Collected())
        reader.feed(encode([("a", b"b")])[:-20])
        self.assertRaises(MultipartError, reader.end)

    def test_head_bound(self) -> None:
        reader = MultipartReader(BOUNDARY, Collected())
        reader.feed(b"--" + BOUNDARY + b"\r\nX: " + b"y" * 1024)
        self.assertRaises(MultipartError, reader.feed, b"y" * MAX_PART_HEAD)

    def test_parts_bound(self) -> None:
        body = encode([("a", b"")] * (MAX_PARTS + 1))
        self.assertRaises(MultipartError, read, body, [])

    def test_buffer_stays_small(self) -> None:
        collected = Collected()
        reader = MultipartReader(BOUNDARY, collected)
        reader.feed(b"--" + BOUNDARY + b"\r\nContent-Disposition: form-data; name=file; filename=f\r\n\r\n")
        for _ in range(100):
            reader.feed(b"z" * 10000)
            self.assertLess(len(reader._buffer), 10000 + len(BOUNDARY) + 4)

    def test_no_disposition(self) -> None:
        self.assertRaises(MultipartError, part_head, b"Content-Type: text/plain")

    def test_boundary_of(self) -> None:
        self.assertEqual(boundary_of(b'multipart/form-data; boundary="a b"'), b"a b")
        self.assertRaises(MultipartError, boundary_of, b"application/json")
        self.assertRaises(MultipartError, boundary_of, b"multipart/form-data")
        self.assertRaises(MultipartError, boundary_of, b"multipart/form-data; boundary=" + b"x" * 71)

    def test_escaped_filename(self) -> None:
        head = part_head(b'Content-Disposition: form-data; name="file"; filename="a\\"b%22c"')
        self.assertEqual(head, PartHead("file", 'a"b"c'))
