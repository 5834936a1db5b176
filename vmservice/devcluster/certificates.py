# -*- test-case-name: tests.devcluster.test_certificates -*-
"""
The development control plane's keys and certificates, made once per directory.

One certificate authority signs everything: the serving certificates (IP 127.0.0.1 and ``localhost``)
of the API server, the scheduler and the controller-manager, etcd's (serving and peer, both ends checked), the API server's client certificates for
etcd and for the kubelets (so that a node's kubelet server can verify the API server as its client), and
the controller-manager signs certificate requests with it. The service accounts' tokens are signed with a
key pair of their own. Every file is 0600; what exists is kept (a restart keeps its identities).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from typing import Sequence

from attrs import frozen
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from vmservice.durable import write_atomic

__all__ = ["CA", "Issued", "KEY_PAIRS", "KeyPair", "VALID_DAYS", "ensure_certificates", "issue", "make_ca"]

#: Days a development certificate is valid (ten years).
VALID_DAYS = 3650

PrivateKey = ec.EllipticCurvePrivateKey


@frozen
class CA:
    """A certificate authority: its key and its (self-signed) certificate."""

    key: PrivateKey
    certificate: x509.Certificate


@frozen
class Issued:
    """What :func:`issue` makes: a key and its certificate."""

    key: PrivateKey
    certificate: x509.Certificate


@frozen
class KeyPair:
    """
    A certificate to issue: its file stem (``NAME.crt``, ``NAME.key``), subject, organisation (a
    Kubernetes group), whether it serves and whether it is a client.
    """

    stem: str
    common_name: str
    organization: str | None
    server: bool
    client: bool


#: The certificates of a control plane directory besides the CA's.
KEY_PAIRS = (
    KeyPair("apiserver", "kube-apiserver", None, server=True, client=False),
    KeyPair("etcd", "etcd", None, server=True, client=True),
    KeyPair("apiserver-etcd-client", "kube-apiserver-etcd-client", None, server=False, client=True),
    KeyPair("kubelet-client", "kube-apiserver-kubelet-client", "system:masters", server=False, client=True),
    KeyPair("scheduler", "kube-scheduler", None, server=True, client=False),
    KeyPair("controller-manager", "kube-controller-manager", None, server=True, client=False),
)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey, now: datetime.datetime) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS)))


def make_ca(common_name: str = "vmservice development CA", now: datetime.datetime | None = None) -> CA:
    """A new certificate authority (an EC P-256 key)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    certificate = (_builder(name, name, key, now)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .sign(key, hashes.SHA256()))
    return CA(key, certificate)


def issue(ca: CA, pair: KeyPair, ips: Sequence[str] = ("127.0.0.1",), dns: Sequence[str] = ("localhost",),
          now: datetime.datetime | None = None) -> Issued:
    """A new key and its certificate for ``pair``, signed by ``ca`` (a server's names: ``ips``, ``dns``)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if pair.server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if pair.client else [])
    builder = (_builder(_name(pair.common_name, pair.organization), ca.certificate.subject, key, now)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if pair.server:
        names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        names += [x509.DNSName(name) for name in dns]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Issued(key, builder.sign(ca.key, hashes.SHA256()))


def _key_pem(key: PrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _load_ca(directory: str) -> CA | None:
    try:
        with open(os.path.join(directory, "ca.key"), "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
        with open(os.path.join(directory, "ca.crt"), "rb") as f:
            certificate = x509.load_pem_x509_certificate(f.read())
    except FileNotFoundError:
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{directory}/ca.key is not an EC key")
    return CA(key, certificate)


def ensure_certificates(directory: str) -> None:
    """
    Make what is missing in ``directory``: ``ca.crt``/``ca.key``, each of :data:`KEY_PAIRS`
    (``NAME.crt``/``NAME.key``) and the service accounts' ``sa.key``/``sa.pub`` (RSA), every file 0600.
    A new CA means new certificates for all.
    """
    ca = _load_ca(directory)
    fresh = ca is None
    if ca is None:
        ca = make_ca()
        write_atomic(os.path.join(directory, "ca.key"), _key_pem(ca.key))
        write_atomic(os.path.join(directory, "ca.crt"), _certificate_pem(ca.certificate))
    for pair in KEY_PAIRS:
        paths = [os.path.join(directory, f"{pair.stem}.{suffix}") for suffix in ("key", "crt")]
        if fresh or not all(os.path.exists(path) for path in paths):
            issued = issue(ca, pair)
            write_atomic(paths[0], _key_pem(issued.key))
            write_atomic(paths[1], _certificate_pem(issued.certificate))
    if not os.path.exists(os.path.join(directory, "sa.pub")):
        service_accounts = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        write_atomic(os.path.join(directory, "sa.key"), _key_pem(service_accounts))
        write_atomic(os.path.join(directory, "sa.pub"), service_accounts.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
