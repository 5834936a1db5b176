"""
Tests of :mod:`vmservice.e2b.signing`: signatures as the official SDK
makes them, the query read, the checks in envd's words, and the sandbox a
signature leads to.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from vmservice.e2b.signing import (BadQuery, FilesQuery, check_signature, files_query, signature, signed_sandbox)

#: Signatures the official SDK (``e2b.sandbox.signature.get_signature``) made.
SDK_SIGNATURES = (
    (("/home/user/a b.txt", "read", "", "tok-123", None), "v1_iWKP4h+2B8CKBZjd5tQn/grLjOytF6xbAMqPrFOfecI"),
    (("rel/x", "write", "root", "tok-123", None), "v1_Ky8g9E9plctq2jePYEURm9gxF0jzRNPdTzo+5wXPXjs"),
)


class SignatureTests(SynchronousTestCase):
    def test_as_the_sdk(self) -> None:
        for arguments, made in SDK_SIGNATURES:
            self.assertEqual(signature(*arguments), made)

    def test_with_expiration(self) -> None:
        self.assertNotEqual(signature("/f", "read", "user", "tok", 60), signature("/f", "read", "user", "tok", None))

    def test_checks(self) -> None:
        query = FilesQuery("/f", None, signature("/f", "read", "", "tok", 100), 100)
        self.assertIsNone(check_signature(query, "read", "tok", 100.5))
        self.assertEqual(check_signature(query, "read", "tok", 101), "signature is already expired")
        self.assertEqual(check_signature(query, "write", "tok", 0), "invalid signature")
        self.assertEqual(check_signature(query, "read", "other", 0), "invalid signature")
        self.assertEqual(check_signature(FilesQuery("/f"), "read", "tok", 0), "missing signature query parameter")

    def test_query(self) -> None:
        self.assertEqual(files_query({b"path": [b"/a"], b"username": [b"root"], b"signature": [b"v1_x"],
                                      b"signature_expiration": [b"12"]}), FilesQuery("/a", "root", "v1_x", 12))
        self.assertEqual(files_query({}), FilesQuery())
        self.assertRaises(BadQuery, files_query, {b"signature_expiration": [b"soon"]})

    def test_signed_sandbox(self) -> None:
        query = FilesQuery("/f", None, signature("/f", "read", "", "two", None))
        tokens = [("a", "one"), ("b", ""), ("c", "two")]
        self.assertEqual(signed_sandbox(query, "read", tokens), "c")
        self.assertIsNone(signed_sandbox(query, "write", tokens))
