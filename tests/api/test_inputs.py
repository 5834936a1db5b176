"""Tests for :mod:`vmservice.api.inputs` (its modules): JSON bodies, modes from headers, wait and shutdown actions."""

from __future__ import annotations

import io
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from vmservice.api.inputs.copies import cp_download_mode, cp_mode, cp_semantics, cp_source, cp_upload_mode, unpacked_size
from vmservice.api.inputs.filesystem import fs_mkdir_request
from vmservice.api.inputs.lifecycle import shutdown_action, wait_for
from vmservice.api.inputs.nodes import create_request
from vmservice.errors import BadRequest
from vmservice.nodes.model import CreateRequest, Wait
from vmservice.nodes.transitions import Op

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBtvT6HR4TvFsTmVm7wBgXVf0M6RprIaaQJcYmcvtIvz"


def _request(body: Any = b"", headers: dict[bytes, bytes] | None = None) -> DummyRequest:
    request = DummyRequest([b""])
    request.content = io.BytesIO(body if isinstance(body, bytes) else json.dumps(body).encode())
    for name, value in (headers or {}).items():
        request.requestHeaders.addRawHeader(name, value)
    return request


class BodyTests(SynchronousTestCase):
    def test_create(self) -> None:
        """A create body becomes the domain's request; zero values of unsupported fields are fine."""
        request = create_request(_request({"hostname": "web", "tags": ["a"], "cpus": 0, "userdata": ""}))
        self.assertEqual(request, CreateRequest(hostname="web", tags=("a",)))
        self.assertEqual(create_request(_request()), CreateRequest())

    def test_create_devices(self) -> None:
        """PCI addresses are made full, each once; gpu_count is taken as given (0 when null)."""
        request = create_request(_request({"pci_devices": ["01:00.0", "0000:01:00.0", "0000:0A:00.1"],
                                                  "gpu_count": 2}))
        self.assertEqual((request.pci_devices, request.gpu_count), (("0000:01:00.0", "0000:0a:00.1"), 2))
        request = create_request(_request({"pci_devices": None, "gpu_count": None}))
        self.assertEqual((request.pci_devices, request.gpu_count), ((), 0))
        error = self.assertRaises(BadRequest, create_request, _request({"pci_devices": ["01:00.0", "x"]}))
        self.assertIn("pci_devices[1]", error.message)

    def test_create_refusals(self) -> None:
        """Unsupported values, negative sizes, empty tags, wrong types and unknown fields are 400s with codes."""
        cases = [
            ({"userdata": "x" * (512 * 1024 + 1)}, "userdata_too_large"),
            ({"secrets": ["../etc"]}, "invalid_body"),
            ({"secrets": [".hidden"]}, "invalid_body"),
            ({"secrets": ["s"] * 65}, "invalid_body"),
            ({"ssh_keys": ["ssh-ed25519"]}, "invalid_ssh_key"),
            ({"ssh_keys": ["ssh-ed25519 AAAA\nssh-rsa BBBB"]}, "invalid_ssh_key"),
            ({"ssh_keys": ["ssh-ed25519 AAAA"]}, "invalid_ssh_key"),
            ({"ssh_keys": [KEY] * 101}, "invalid_ssh_key"),
            ({"codehost_user": "-octocat"}, "invalid_codehost_user"),
            ({"codehost_user": "octo--cat"}, "invalid_codehost_user"),
            ({"codehost_user": "../octocat"}, "invalid_codehost_user"),
            ({"codehost_user": "x" * 40}, "invalid_codehost_user"),
            ({"import_user": "Root"}, "invalid_import_user"),
            ({"import_user": "a b"}, "invalid_import_user"),
            ({"gpu_count": -1}, "invalid_body"),
            ({"gpu_count": 17}, "too_many_pci_devices"),
            ({"pci_devices": ["gpu0"]}, "invalid_pci_address"),
            ({"pci_devices": ["01:00.0"] * 17}, "too_many_pci_devices"),
            ({"pci_devices": "01:00.0"}, "invalid_body"),
            ({"ram_bytes": -1}, "invalid_body"),
            ({"tags": [""]}, "invalid_body"),
            ({"cpus": "2"}, "invalid_body"),
            ({"colour": "red"}, "invalid_body"),
            (b"[1]", "invalid_body"),
            (b"{", "invalid_json"),
        ]
        for body, code in cases:
            error = self.assertRaises(BadRequest, create_request, _request(body))
            self.assertEqual(error.code, code, body)

    def test_ssh_keys(self) -> None:
        """
        Keys are checked by the one parser and kept as its normalised lines, each once; a refusal names
        the key's index and what is wrong.
        """
        request = create_request(_request({"ssh_keys": [f"  {KEY}  me@laptop\n", f"{KEY} me@laptop"],
                                                  "codehost_user": "Octo-Cat"}))
        self.assertEqual((request.ssh_keys, request.codehost_user), ((f"{KEY} me@laptop",), "Octo-Cat"))
        error = self.assertRaises(BadRequest, create_request,
                                  _request({"ssh_keys": [KEY, f'from="10.0.0.1" {KEY}']}))
        self.assertEqual(error.message, "field 'ssh_keys[1]' is not an OpenSSH public key: options before the key "
                                        "type are not accepted")
        self.assertIsNone(create_request(_request({"codehost_user": ""})).codehost_user)

    def test_mkdir(self) -> None:
        """mkdir's body: a guest path, recursive, an octal mode (0755 when empty)."""
        self.assertEqual(fs_mkdir_request(_request({"path": "/srv/a"})), ("/srv/a", False, 0o755))
        self.assertEqual(fs_mkdir_request(_request({"path": "~/a", "recursive": True, "mode": "0700"})),
                         ("~/a", True, 0o700))
        self.assertEqual(self.assertRaises(BadRequest, fs_mkdir_request, _request({"path": "a"})).code,
                         "invalid_path")
        self.assertEqual(self.assertRaises(BadRequest, fs_mkdir_request,
                                           _request({"path": "/a", "mode": "rwx"})).code, "invalid_mode")


class ChoiceTests(SynchronousTestCase):
    def test_wait(self) -> None:
        """wait=agent waits for the agent, wait=userdata for the userdata too, absent waits for nothing."""
        self.assertEqual((wait_for("agent"), wait_for("userdata"), wait_for(None)),
                         (Wait.AGENT, Wait.USERDATA, Wait.NONE))

    def test_shutdown_action(self) -> None:
        """The query's action wins over the body's; reboot is the default; others are refused."""
        self.assertIs(shutdown_action(_request({"action": "reboot"}), "shutdown"), Op.SHUTDOWN)
        self.assertIs(shutdown_action(_request({"action": "shutdown"}), None), Op.SHUTDOWN)
        self.assertIs(shutdown_action(_request(), None), Op.REBOOT)
        for body in ({"action": "halt"}, {"action": 3}):
            self.assertEqual(self.assertRaises(BadRequest, shutdown_action, _request(body), None).code,
                             "invalid_action")

    def test_cp_mode(self) -> None:
        """The mode parameter wins; else tar when the header names only the tar media type."""
        tar = {b"content-type": b"application/x-tar"}
        self.assertEqual(cp_mode(_request(headers=tar), "binary", b"content-type"), "binary")
        self.assertEqual(cp_mode(_request(headers=tar), None, b"content-type"), "tar")
        both = {b"accept": b"application/octet-stream, application/x-tar"}
        self.assertEqual(cp_mode(_request(headers=both), None, b"accept"), "binary")
        self.assertEqual(cp_mode(_request(), None, b"accept"), "binary")


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
        tar = _request(headers={b"content-type": b"application/x-tar"})
        self.assertEqual(cp_upload_mode(tar, "cp-v1-binary", None), "binary")
        self.assertEqual(cp_upload_mode(_request(), "cp-v1-tar", None), "tar")
        self.assertEqual(cp_upload_mode(tar, "cp-v1-recursive", "file"), "binary")
        self.assertEqual(cp_upload_mode(_request(), "cp-v1-recursive", "directory"), "tar")
        self.assertEqual(cp_upload_mode(tar, "cp-v1-recursive", None), "tar")
        self.assertEqual(cp_upload_mode(_request(), "cp-v1-recursive", None), "binary")
        self.assertEqual(cp_upload_mode(tar, None, None), "tar")

    def test_download_mode(self) -> None:
        """cp-v1-recursive is recursive; the others as their legacy mode."""
        both = _request(headers={b"accept": b"application/octet-stream, application/x-tar"})
        self.assertEqual(cp_download_mode(both, "cp-v1-recursive"), "recursive")
        self.assertEqual(cp_download_mode(both, "cp-v1-tar"), "tar")
        self.assertEqual(cp_download_mode(both, "cp-v1-binary"), "binary")
        self.assertEqual(cp_download_mode(_request(headers={b"accept": b"application/x-tar"}), None), "tar")

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
        self.assertEqual(unpacked_size(_request(headers={b"x-slicer-unpacked-size": text})), size)

    @given(st.text(min_size=1, max_size=12).filter(lambda t: not t.strip(" \t").isdigit() or not t.strip(" \t").isascii()
                                                    or len(t.strip(" \t")) > 20))
    def test_unpacked_size_refused(self, text: str) -> None:
        """Anything but decimal digits (signs, fractions, units, other digits) is a 400 invalid_header."""
        raw = text.encode("utf-8")
        if b"\r" in raw or b"\n" in raw:
            return
        error = self.assertRaises(BadRequest, unpacked_size, _request(headers={b"x-slicer-unpacked-size": raw}))
        self.assertEqual(error.code, "invalid_header")

    def test_unpacked_size_absent(self) -> None:
        """No header is None; examples of refused values."""
        self.assertIsNone(unpacked_size(_request()))
        for bad in (b"-1", b"1.5", b"10MB", b"", b"0x10", b"1" * 21):
            self.assertRaises(BadRequest, unpacked_size, _request(headers={b"x-slicer-unpacked-size": bad}))
