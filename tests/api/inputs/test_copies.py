"""Tests for :mod:`vmservice.api.inputs.copies`: copy modes from headers, cp-v1 placement, the unpacked size."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.api.inputs.requests import dummy_request
from vmservice.api.inputs.copies import cp_download_mode, cp_mode, cp_semantics, cp_source, cp_upload_mode, unpacked_size
from vmservice.errors import BadRequest


class ModeTests(SynchronousTestCase):
    def test_cp_mode(self) -> None:
        """The mode parameter wins; else tar when the header names only the tar media type."""
        tar = {b"content-type": b"application/x-tar"}
        self.assertEqual(cp_mode(dummy_request(headers=tar), "binary", b"content-type"), "binary")
        self.assertEqual(cp_mode(dummy_request(headers=tar), None, b"content-type"), "tar")
        both = {b"accept": b"application/octet-stream, application/x-tar"}
        self.assertEqual(cp_mode(dummy_request(headers=both), None, b"accept"), "binary")
        self.assertEqual(cp_mode(dummy_request(), None, b"accept"), "binary")


class CopyInputTests(SynchronousTestCase):
    """The cp-v1 parameters and X-Slicer-Unpacked-Size."""

    def test_semantics(self) -> None:
        """A cp-v1-* mode or copy_semantics=cp-v1 is cp-v1; anything else legacy."""
        for mode in ("cp-v1-binary", "cp-v1-tar", "cp-v1-recursive"):
            self.assertEqual(cp_semantics(mode, None), "cp-v1")
        self.assertEqual(cp_semantics("binary", "cp-v1"), "cp-v1")
        self.assertEqual(cp_semantics(None, "cp-v1"), "cp-v1")
        self.assertEqual(cp_semantics("tar", None), "legacy")
        self.assertEqual(cp_semantics(None, None), "legacy")

    def test_upload_mode(self) -> None:
        """cp-v1-binary/tar are binary/tar; cp-v1-recursive goes by source_type, else by Content-Type."""
        tar = dummy_request(headers={b"content-type": b"application/x-tar"})
        self.assertEqual(cp_upload_mode(tar, "cp-v1-binary", None), "binary")
        self.assertEqual(cp_upload_mode(dummy_request(), "cp-v1-tar", None), "tar")
        self.assertEqual(cp_upload_mode(tar, "cp-v1-recursive", "file"), "binary")
        self.assertEqual(cp_upload_mode(dummy_request(), "cp-v1-recursive", "directory"), "tar")
        self.assertEqual(cp_upload_mode(tar, "cp-v1-recursive", None), "tar")
        self.assertEqual(cp_upload_mode(dummy_request(), "cp-v1-recursive", None), "binary")
        self.assertEqual(cp_upload_mode(tar, None, None), "tar")

    def test_download_mode(self) -> None:
        """cp-v1-recursive is recursive; the others as their legacy mode."""
        both = dummy_request(headers={b"accept": b"application/octet-stream, application/x-tar"})
        self.assertEqual(cp_download_mode(both, "cp-v1-recursive"), "recursive")
        self.assertEqual(cp_download_mode(both, "cp-v1-tar"), "tar")
        self.assertEqual(cp_download_mode(both, "cp-v1-binary"), "binary")
        self.assertEqual(cp_download_mode(dummy_request(headers={b"accept": b"application/x-tar"}), None), "tar")

    def test_source(self) -> None:
        """Legacy ignores the cp-v1 parameters; cp-v1 checks them against each other and the mode."""
        self.assertEqual(cp_source("legacy", "binary", "a/b", "directory", True), (None, False))
        self.assertEqual(cp_source("cp-v1", "binary", "f.txt", "file", False), ("f.txt", False))
        self.assertEqual(cp_source("cp-v1", "tar", "", "directory", True), (None, True))
        self.assertEqual(cp_source("cp-v1", "tar", "src", None, True), ("src", True))
        for args in (("binary", "f", "directory", False), ("tar", "d", "file", False), ("binary", "f", "file", True),
                     ("binary", "a/b", None, False), ("tar", "..", None, False), ("tar", ".", None, True),
                     ("binary", None, "file", False), ("tar", "", "directory", False)):
            error = self.assertRaises(BadRequest, cp_source, "cp-v1", *args)
            self.assertEqual(error.code, "invalid_query", args)

    @given(st.integers(0, 10**20 - 1), st.sampled_from(["", " ", "\t"]))
    def test_unpacked_size(self, size: int, space: str) -> None:
        """Any count of bytes in decimal digits (around spaces) is read; the last of several wins."""
        text = f"{space}{size}{space}".encode()
        self.assertEqual(unpacked_size(dummy_request(headers={b"x-slicer-unpacked-size": text})), size)

    @given(st.text(min_size=1, max_size=12).filter(lambda t: not t.strip(" \t").isdigit() or not t.strip(" \t").isascii()
                                                    or len(t.strip(" \t")) > 20))
    def test_unpacked_size_refused(self, text: str) -> None:
        """Anything but decimal digits (signs, fractions, units, other digits) is a 400 invalid_header."""
        raw = text.encode("utf-8")
        if b"\r" in raw or b"\n" in raw:
            return
        error = self.assertRaises(BadRequest, unpacked_size, dummy_request(headers={b"x-slicer-unpacked-size": raw}))
        self.assertEqual(error.code, "invalid_header")

    def test_unpacked_size_absent(self) -> None:
        """No header is None; examples of refused values."""
        self.assertIsNone(unpacked_size(dummy_request()))
        for bad in (b"-1", b"1.5", b"10MB", b"", b"0x10", b"1" * 21):
            self.assertRaises(BadRequest, unpacked_size, dummy_request(headers={b"x-slicer-unpacked-size": bad}))
