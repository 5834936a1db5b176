"""
Tests for :mod:`vmservice.wire.upstream`: the one rule of a tunnel's
upstream, read alike by the daemon and the client.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.wire.upstream import MAX_UNIX_SOCKET_PATH, Upstream


class UpstreamTests(SynchronousTestCase):
    def test_parse(self) -> None:
        """host:port, [v6]:port and unix:/path; anything else is a ValueError."""
        self.assertEqual(Upstream.parse("127.0.0.1:80"), Upstream(host="127.0.0.1", port=80))
        self.assertEqual(Upstream.parse("[::1]:22"), Upstream(host="::1", port=22))
        self.assertEqual(Upstream.parse("unix:/run/a.sock"), Upstream(unix="/run/a.sock"))
        for bad in ("", "x", ":80", "h:", "h:0", "h:65536", "h:-1", "unix:a", "a b:1", "unix:/" + "a" * 200):
            self.assertRaises(ValueError, Upstream.parse, bad)

    @given(st.text(max_size=40))
    def test_parse_any(self, text: str) -> None:
        """Any text parses or raises ValueError; what parses describes itself back."""
        try:
            parsed = Upstream.parse(text)
        except ValueError:
            return
        self.assertEqual(Upstream.parse(parsed.describe()), parsed)

    def test_refusals_say_why(self) -> None:
        """Each refusal names what is wrong: the path, the port, the host."""
        cases = {
            "unix:run/a.sock": "a UNIX socket upstream needs an absolute path: 'unix:run/a.sock'",
            "unix:/" + "a" * MAX_UNIX_SOCKET_PATH: f"the UNIX socket path is longer than {MAX_UNIX_SOCKET_PATH} bytes",
            "h:0": "the upstream must be host:port (port 1 to 65535) or unix:/path, not 'h:0'",
            "a b:80": "invalid upstream host 'a b'",
            "x" * 254 + ":80": f"invalid upstream host {'x' * 254!r}",
        }
        for text, words in cases.items():
            with self.assertRaises(ValueError) as raised:
                Upstream.parse(text)
            self.assertEqual(str(raised.exception), words, text)

    def test_longest_path(self) -> None:
        """A socket path of 107 bytes is taken (``sun_path`` holds 108 with its NUL)."""
        path = "/" + "a" * (MAX_UNIX_SOCKET_PATH - 1)
        self.assertEqual(Upstream.parse("unix:" + path), Upstream(unix=path))
