# -*- test-case-name: tests.cluster.kubelet.test_tls -*-
"""
The kubelet port's TLS: the serving certificate and who may connect.

The serving certificate and key come from files when the operator gives
them; otherwise one self-signed pair is made at the first start into a
private directory (0700, the key 0600), named after the node (CN) with the
node's address and hostname as its subject alternative names, and used from
then on (made again once it is within :data:`RENEW_BEFORE` of its end).

With a client CA every client is asked for a certificate, and one the CA
did not sign fails the handshake; a client with none gets through the
handshake but not past :meth:`KubeletTls.authenticated` (a 401 with a
Status).  Without a client CA every client is let in (docs/security.md).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from typing import Any, Optional

from attrs import frozen
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.internet.ssl import Certificate, CertificateOptions, PrivateCertificate

from ...durable import write_atomic
from ...private_files import private_directory

#: How long a generated certificate is valid, and how long before its end it is made again.
LIFETIME = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
CERT_NAME, KEY_NAME = "kubelet.crt", "kubelet.key"


@frozen
class KubeletTlsConfig:
    """
    :ivar node_name: the Node's name (the generated certificate's CN).
    :ivar address: the node's InternalIP (a SAN of the generated certificate).
    :ivar hostname: the host's name (a SAN too).
    :ivar generated_dir: where a generated pair is kept (made 0700).
    :ivar cert_file: the serving certificate (PEM, the chain after it), or ``None`` to generate one.
    :ivar key_file: its key (PEM); given together with ``cert_file``.
    :ivar client_ca_file: the CA that signs the API server's client certificate, or ``None``: anyone may connect.
    """

    node_name: str
    address: str
    hostname: str
    generated_dir: str
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    client_ca_file: Optional[str] = None


def _read(path: str) -> bytes:
    with open(path, "rb") as stream:
        return stream.read()


def generate(config: KubeletTlsConfig, now: datetime.datetime) -> tuple[bytes, bytes]:
    """A new self-signed certificate and key (PEM) for the node, valid from ``now``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, config.node_name)])
    names: list[x509.GeneralName] = [x509.DNSName(config.hostname)]
    try:
        names.insert(0, x509.IPAddress(ipaddress.ip_address(config.address)))
    except ValueError:
        names.append(x509.DNSName(config.address))
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + LIFETIME)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return (certificate.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _still_good(cert_pem: bytes, config: KubeletTlsConfig, now: datetime.datetime) -> bool:
    certificate = x509.load_pem_x509_certificate(cert_pem)
    common = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return (certificate.not_valid_after_utc - RENEW_BEFORE > now
            and [attribute.value for attribute in common] == [config.node_name])


def serving_pair(config: KubeletTlsConfig, now: datetime.datetime) -> tuple[bytes, bytes]:
    """
    The serving certificate and key (PEM): the configured files, else the
    generated pair (made when missing, stale or for another node name).
    """
    if config.cert_file is not None and config.key_file is not None:
        return _read(config.cert_file), _read(config.key_file)
    private_directory(config.generated_dir)
    cert_path = os.path.join(config.generated_dir, CERT_NAME)
    key_path = os.path.join(config.generated_dir, KEY_NAME)
    try:
        cert_pem, key_pem = _read(cert_path), _read(key_path)
        if _still_good(cert_pem, config, now):
            return cert_pem, key_pem
    except (FileNotFoundError, ValueError):
        pass
    cert_pem, key_pem = generate(config, now)
    write_atomic(key_path, key_pem)
    write_atomic(cert_path, cert_pem)
    return cert_pem, key_pem


class KubeletTls:
    """
    The listener's TLS context and the check of each request's client.

    :param config: the files and names.
    :param now: the current time (UTC), for a generated certificate.
    """

    def __init__(self, config: KubeletTlsConfig, now: datetime.datetime) -> None:
        cert_pem, key_pem = serving_pair(config, now)
        self.certificate_pem = cert_pem
        self.client_ca = config.client_ca_file is not None
        server = PrivateCertificate.loadPEM(cert_pem + b"\n" + key_pem)
        extra = [Certificate.loadPEM(block).original for block in _pem_blocks(cert_pem)[1:]]
        authorities = ([Certificate.loadPEM(block).original for block in _pem_blocks(_read(config.client_ca_file))]
                       if config.client_ca_file is not None else None)
        self.options = CertificateOptions(
            privateKey=server.privateKey.original, certificate=server.original, extraCertChain=extra or None,
            verify=authorities is not None, caCerts=authorities, requireCertificate=False,
        )

    def authenticated(self, transport: Any) -> bool:
        """Whether the client of ``transport`` may be served: it showed a verified certificate, or none is asked."""
        if not self.client_ca:
            return True
        getter = getattr(transport, "getPeerCertificate", None)
        return getter is not None and getter() is not None


def _pem_blocks(pem: bytes) -> list[bytes]:
    """Each certificate of a PEM bundle."""
    end = b"-----END CERTIFICATE-----"
    return [block.strip() + b"\n" + end + b"\n" for block in pem.split(end) if b"-----BEGIN CERTIFICATE-----" in block]


__all__ = ["CERT_NAME", "KEY_NAME", "LIFETIME", "KubeletTls", "KubeletTlsConfig", "generate", "serving_pair"]
