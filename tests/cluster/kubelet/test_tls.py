"""Tests for :mod:`vmservice.cluster.kubelet.tls`: the serving certificate and who may connect."""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat

from cryptography import x509
from cryptography.x509.oid import NameOID
from twisted.trial.unittest import SynchronousTestCase

from vmservice.cluster.kubelet.tls import CERT_NAME, KEY_NAME, LIFETIME, KubeletTls, KubeletTlsConfig, serving_pair

NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)


class PeerTransport:
    def __init__(self, certificate: object) -> None:
        self.certificate = certificate

    def getPeerCertificate(self) -> object:
        return self.certificate


class TlsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = os.path.join(self.mktemp(), "tls")
        self.config = KubeletTlsConfig("node-a", "10.0.0.5", "host-a", self.directory)

    def test_generated(self) -> None:
        """A pair is made once: CN the node, SANs its address and hostname; the directory 0700, the key 0600."""
        cert_pem, key_pem = serving_pair(self.config, NOW)
        certificate = x509.load_pem_x509_certificate(cert_pem)
        self.assertEqual(certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value, "node-a")
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        self.assertEqual(names.get_values_for_type(x509.IPAddress), [ipaddress.ip_address("10.0.0.5")])
        self.assertEqual(names.get_values_for_type(x509.DNSName), ["host-a"])
        self.assertEqual(stat.S_IMODE(os.stat(self.directory).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.directory, KEY_NAME)).st_mode), 0o600)
        self.assertEqual(serving_pair(self.config, NOW + datetime.timedelta(days=1)), (cert_pem, key_pem))

    def test_renewed(self) -> None:
        """A pair near its end, or made for another node name, is made again."""
        first, _ = serving_pair(self.config, NOW)
        self.assertNotEqual(serving_pair(self.config, NOW + LIFETIME)[0], first)
        other = KubeletTlsConfig("node-b", "10.0.0.5", "host-a", self.directory)
        self.assertNotEqual(serving_pair(other, NOW)[0], first)

    def test_configured_files(self) -> None:
        """Configured files are used as they are."""
        cert_pem, key_pem = serving_pair(self.config, NOW)
        os.rename(os.path.join(self.directory, CERT_NAME), os.path.join(self.directory, "given.crt"))
        os.rename(os.path.join(self.directory, KEY_NAME), os.path.join(self.directory, "given.key"))
        given = KubeletTlsConfig("node-a", "10.0.0.5", "host-a", self.directory,
                                 os.path.join(self.directory, "given.crt"), os.path.join(self.directory, "given.key"))
        self.assertEqual(serving_pair(given, NOW), (cert_pem, key_pem))
        self.assertFalse(os.path.exists(os.path.join(self.directory, CERT_NAME)))

    def test_link_refused(self) -> None:
        """The generated pair's directory is never a link."""
        os.makedirs(os.path.dirname(self.directory))
        os.symlink("/tmp", self.directory)
        self.assertRaises(Exception, serving_pair, self.config, NOW)

    def test_authenticated(self) -> None:
        """With a client CA only a client that showed a (verified) certificate is let in; without, anyone."""
        cert_pem, _ = serving_pair(self.config, NOW)
        ca = os.path.join(self.directory, CERT_NAME)
        checked = KubeletTls(KubeletTlsConfig("node-a", "10.0.0.5", "host-a", self.directory, client_ca_file=ca),
                             datetime.datetime.now(datetime.timezone.utc))
        self.assertFalse(checked.authenticated(PeerTransport(None)))
        self.assertFalse(checked.authenticated(object()))
        self.assertTrue(checked.authenticated(PeerTransport(object())))
        self.assertTrue(KubeletTls(self.config, datetime.datetime.now(datetime.timezone.utc)).authenticated(None))
