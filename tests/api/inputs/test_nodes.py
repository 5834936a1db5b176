"""Tests for :mod:`vmservice.api.inputs.nodes`: the body of a create."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.api.inputs.requests import dummy_request
from vmservice.api.inputs.nodes import create_request
from vmservice.errors import BadRequest
from vmservice.nodes.model import CreateRequest

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBtvT6HR4TvFsTmVm7wBgXVf0M6RprIaaQJcYmcvtIvz"


class CreateTests(SynchronousTestCase):
    def test_create(self) -> None:
        """A create body becomes the domain's request; zero values of unsupported fields are fine."""
        request = create_request(dummy_request({"hostname": "web", "tags": ["a"], "cpus": 0, "userdata": ""}))
        self.assertEqual(request, CreateRequest(hostname="web", tags=("a",)))
        self.assertEqual(create_request(dummy_request()), CreateRequest())

    def test_create_devices(self) -> None:
        """PCI addresses are made full, each once; gpu_count is taken as given (0 when null)."""
        request = create_request(dummy_request({"pci_devices": ["01:00.0", "0000:01:00.0", "0000:0A:00.1"],
                                                  "gpu_count": 2}))
        self.assertEqual((request.pci_devices, request.gpu_count), (("0000:01:00.0", "0000:0a:00.1"), 2))
        request = create_request(dummy_request({"pci_devices": None, "gpu_count": None}))
        self.assertEqual((request.pci_devices, request.gpu_count), ((), 0))
        error = self.assertRaises(BadRequest, create_request, dummy_request({"pci_devices": ["01:00.0", "x"]}))
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
            error = self.assertRaises(BadRequest, create_request, dummy_request(body))
            self.assertEqual(error.code, code, body)

    def test_ssh_keys(self) -> None:
        """
        Keys are checked by the one parser and kept as its normalised lines, each once; a refusal names
        the key's index and what is wrong.
        """
        request = create_request(dummy_request({"ssh_keys": [f"  {KEY}  me@laptop\n", f"{KEY} me@laptop"],
                                                  "codehost_user": "Octo-Cat"}))
        self.assertEqual((request.ssh_keys, request.codehost_user), ((f"{KEY} me@laptop",), "Octo-Cat"))
        error = self.assertRaises(BadRequest, create_request,
                                  dummy_request({"ssh_keys": [KEY, f'from="10.0.0.1" {KEY}']}))
        self.assertEqual(error.message, "field 'ssh_keys[1]' is not an OpenSSH public key: options before the key "
                                        "type are not accepted")
        self.assertIsNone(create_request(dummy_request({"codehost_user": ""})).codehost_user)
