"""
Tests for :mod:`vmservice.devcluster.certificates`: the CA and what it signs.
"""

from __future__ import annotations

import ipaddress
import os
import stat

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.certificates import KEY_PAIRS, ensure_certificates, issue, make_ca


def load(directory: str, name: str) -> x509.Certificate:
    with open(os.path.join(directory, name), "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


def contents(directory: str) -> dict[str, bytes]:
    found = {}
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), "rb") as f:
            found[name] = f.read()
    return found


class IssueTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.ca = make_ca()
        self.apiserver = issue(self.ca, KEY_PAIRS[0]).certificate

    def test_ca(self) -> None:
        """The CA is a CA, self-signed."""
        certificate = self.ca.certificate
        self.assertTrue(certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
        certificate.verify_directly_issued_by(certificate)

    def test_signed_by_the_ca(self) -> None:
        """An issued certificate is signed by the CA and no CA itself."""
        self.apiserver.verify_directly_issued_by(self.ca.certificate)
        self.assertFalse(self.apiserver.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
        other = make_ca()
        self.assertRaises(Exception, self.apiserver.verify_directly_issued_by, other.certificate)

    def test_serving_names(self) -> None:
        """The API server's certificate names 127.0.0.1 and localhost, for serving."""
        names = self.apiserver.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        self.assertEqual(names.get_values_for_type(x509.IPAddress), [ipaddress.ip_address("127.0.0.1")])
        self.assertEqual(names.get_values_for_type(x509.DNSName), ["localhost"])
        usages = self.apiserver.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        self.assertEqual(list(usages), [ExtendedKeyUsageOID.SERVER_AUTH])

    def test_kubelet_client(self) -> None:
        """The API server's certificate for kubelets is a client's, in system:masters, without names."""
        pair = [each for each in KEY_PAIRS if each.stem == "kubelet-client"][0]
        certificate = issue(self.ca, pair).certificate
        usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        self.assertEqual(list(usages), [ExtendedKeyUsageOID.CLIENT_AUTH])
        self.assertIn("O=system:masters", certificate.subject.rfc4514_string())
        self.assertRaises(x509.ExtensionNotFound, certificate.extensions.get_extension_for_class,
                          x509.SubjectAlternativeName)


class EnsureTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.mkdir(self.directory, 0o700)
        ensure_certificates(self.directory)

    def test_files_private(self) -> None:
        """Every file made is 0600."""
        names = sorted(os.listdir(self.directory))
        expected = sorted(["ca.crt", "ca.key", "sa.key", "sa.pub"]
                          + [f"{pair.stem}.{suffix}" for pair in KEY_PAIRS for suffix in ("crt", "key")])
        self.assertEqual(names, expected)
        for name in names:
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.directory, name)).st_mode), 0o600, name)

    def test_all_signed_by_the_ca(self) -> None:
        """Each certificate of the directory is signed by its CA."""
        ca = load(self.directory, "ca.crt")
        for pair in KEY_PAIRS:
            load(self.directory, f"{pair.stem}.crt").verify_directly_issued_by(ca)

    def test_kept(self) -> None:
        """A second call keeps what exists; a missing pair is issued again by the same CA."""
        before = contents(self.directory)
        os.unlink(os.path.join(self.directory, "etcd.key"))
        ensure_certificates(self.directory)
        after = contents(self.directory)
        self.assertEqual({name for name in before if before[name] != after[name]}, {"etcd.key", "etcd.crt"})
        load(self.directory, "etcd.crt").verify_directly_issued_by(load(self.directory, "ca.crt"))

    def test_new_ca_new_certificates(self) -> None:
        """Without its CA, every certificate is issued again by a new one."""
        before = load(self.directory, "apiserver.crt")
        os.unlink(os.path.join(self.directory, "ca.key"))
        ensure_certificates(self.directory)
        self.assertNotEqual(load(self.directory, "apiserver.crt"), before)
        load(self.directory, "apiserver.crt").verify_directly_issued_by(load(self.directory, "ca.crt"))

    def test_keys(self) -> None:
        """The certificates' keys are EC; the service accounts' key is RSA."""
        self.assertIsInstance(load(self.directory, "apiserver.crt").public_key(), ec.EllipticCurvePublicKey)
        with open(os.path.join(self.directory, "sa.key"), "rb") as f:
            self.assertIn(b"BEGIN PRIVATE KEY", f.read())
