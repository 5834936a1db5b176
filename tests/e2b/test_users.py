"""Tests of :mod:`vmservice.e2b.users`: which user a call names."""

from __future__ import annotations

from base64 import b64encode

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.e2b.connect import Code, ConnectError
from vmservice.e2b.users import ROOT, USER, user_named, user_of_authorization


def basic(text: str) -> bytes:
    return b"Basic " + b64encode(text.encode())


class UserTests(SynchronousTestCase):
    def test_default(self) -> None:
        """No header, or no name: ``user``."""
        self.assertEqual((user_of_authorization(None), user_named(""), user_named(None)), (USER, USER, USER))

    def test_named(self) -> None:
        """The SDKs' ``Basic base64("name:")``."""
        self.assertEqual(user_of_authorization(basic("root:")), ROOT)
        self.assertEqual(user_of_authorization(basic("user:")), USER)
        self.assertEqual((USER.uid, USER.gid, USER.home), (1000, 1000, "/home/user"))

    def test_refused(self) -> None:
        """Another scheme, bad base64, a user the guest has not: ``unauthenticated``."""
        for header in (b"Bearer x", b"Basic !!!", basic("nobody:"), b"Basic " + b64encode(b"\xff:")):
            with self.assertRaises(ConnectError) as raised:
                user_of_authorization(header)
            self.assertEqual(raised.exception.code, Code.UNAUTHENTICATED)

    @given(st.binary(max_size=40))
    def test_any_header(self, header: bytes) -> None:
        """Any header is a user or ``unauthenticated``."""
        try:
            self.assertIn(user_of_authorization(header), (ROOT, USER))
        except ConnectError as error:
            self.assertEqual(error.code, Code.UNAUTHENTICATED)
