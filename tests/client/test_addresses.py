# -*- test-case-name: tests.client.test_addresses -*-
"""
Tests for :mod:`vmservice.client.addresses`: the address rule shared with every Slicer client.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.client.addresses import is_unix_socket, socket_path


class AddressTests(SynchronousTestCase):
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
