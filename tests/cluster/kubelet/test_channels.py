"""Tests for :mod:`vmservice.cluster.kubelet.channels`: the exec WebSocket's channel codec."""

from __future__ import annotations

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.cluster.kubelet import channels
from vmservice.cluster.kubelet.channels import (
    V4, V5, CloseStream, Ignored, Malformed, Resize, Stdin, choose, decode, encode,
)


class ChooseTests(SynchronousTestCase):
    def test_v5_preferred(self) -> None:
        """v5 when offered, v4 otherwise, nothing for protocols not served."""
        self.assertEqual(choose([V4, V5, "channel.k8s.io"]), V5)
        self.assertEqual(choose(["base64.channel.k8s.io", V4]), V4)
        self.assertIsNone(choose(["v3.channel.k8s.io", "SPDY/3.1"]))


class DecodeTests(SynchronousTestCase):
    def test_stdin(self) -> None:
        self.assertEqual(decode(b"\x00hello", True, V5), Stdin(b"hello"))

    def test_resize(self) -> None:
        self.assertEqual(decode(b'\x04{"Width":120,"Height":40}', True, V5), Resize(120, 40))

    def test_bad_resize(self) -> None:
        """A resize that is not JSON, not an object, out of range or too long is Malformed."""
        for payload in (b"{", b"[1]", b'{"Width":-1,"Height":2}', b'{"Width":1.5,"Height":2}',
                        b'{"Width":true,"Height":2}', b'{"Width":1}', b" " * 300 + b"{}"):
            self.assertIsInstance(decode(b"\x04" + payload, True, V5), Malformed)

    def test_close(self) -> None:
        """v5's close names a channel; v4 has none; a close of more than one byte is Malformed."""
        self.assertEqual(decode(b"\xff\x00", True, V5), CloseStream(0))
        self.assertIsInstance(decode(b"\xff\x00", True, V4), Ignored)
        self.assertIsInstance(decode(b"\xff\x00\x01", True, V5), Malformed)

    def test_ignored(self) -> None:
        """Text, empty messages, empty stdin, and channels the server writes are Ignored."""
        for message, binary in ((b"\x00hi", False), (b"", True), (b"\x00", True), (b"\x01out", True),
                                (b"\x03{}", True), (b"\x09x", True)):
            self.assertIsInstance(decode(message, binary, V5), Ignored)

    @given(st.binary(max_size=64), st.booleans(), st.sampled_from([V4, V5]))
    def test_anything(self, message: bytes, binary: bool, protocol: str) -> None:
        """Any message decodes to an event, never an exception."""
        self.assertIsInstance(decode(message, binary, protocol), (Stdin, Resize, CloseStream, Ignored, Malformed))


class EncodeTests(SynchronousTestCase):
    def test_empty(self) -> None:
        """No data is one message of the channel byte alone (what opens a stream)."""
        self.assertEqual(encode(channels.STDOUT, b""), [b"\x01"])

    @given(st.sampled_from([channels.STDOUT, channels.STDERR, channels.ERROR]),
           st.binary(min_size=1, max_size=3 * channels.MAX_PAYLOAD + 7))
    def test_round_trip(self, channel: int, data: bytes) -> None:
        """Messages carry the data in order, each on the channel, none over the payload limit."""
        messages = encode(channel, data)
        self.assertTrue(all(message[0] == channel for message in messages))
        self.assertTrue(all(1 < len(message) <= channels.MAX_PAYLOAD + 1 for message in messages))
        self.assertEqual(b"".join(message[1:] for message in messages), data)

    @given(st.binary(min_size=1, max_size=1000))
    def test_stdin_round_trip(self, data: bytes) -> None:
        """What a client encodes on stdin decodes to the same bytes."""
        self.assertEqual([decode(message, True, V5) for message in encode(channels.STDIN, data)], [Stdin(data)])
