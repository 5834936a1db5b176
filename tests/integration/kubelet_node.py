"""
A real daemon with the kubelet API beside it, for :mod:`tests.integration.test_kubelet_api`, without a
control plane (the daemon wires the kubelet port itself only as a cluster node, tested end to end in
:mod:`tests.integration.test_cluster`): :func:`main` runs in a child process what ``twistd vmservice``
runs (the configuration, :func:`~vmservice.service.make_service`) and adds the kubelet listener on the
same fleet, one pod (``default/web``, container ``vm``: :class:`~tests.cluster.kubelet.fakes.FakeResolver`)
standing for VM ``demo-1``.  :class:`KubeletDaemon`
is a :class:`~tests.integration.daemon.Daemon` running it; :func:`certificates` makes the client CA and
the certificates the tests connect with.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from typing import Any, cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.daemon import Daemon, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _signed(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey,
            ca: bool) -> bytes:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                        critical=True)
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def certificates(directory: str) -> dict[str, str]:
    """
    In ``directory``: a client CA (``ca.crt``), a client certificate it signed (``client.crt``/``.key``, as the
    API server's) and one a stranger signed (``stranger.crt``/``.key``).  The paths by name.
    """
    ca_key, stranger_ca_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    files = {"ca.crt": _signed("kubelet-client-ca", ca_key, "kubelet-client-ca", ca_key, True)}
    for name, issuer, issuer_key in (("client", "kubelet-client-ca", ca_key), ("stranger", "stranger-ca", stranger_ca_key)):
        key = ec.generate_private_key(ec.SECP256R1())
        files[f"{name}.crt"] = _signed("kube-apiserver-kubelet-client", key, issuer, issuer_key, False)
        files[f"{name}.key"] = _pem(key)
    paths = {}
    for name, data in files.items():
        paths[name] = os.path.join(directory, name)
        with open(paths[name], "wb") as stream:
            stream.write(data)
    return paths


class KubeletDaemon(Daemon):
    """The daemon, run by :func:`main` with the kubelet API on ``kubelet_port`` (TLS, client CA ``client_ca``)."""

    def __init__(self, client_ca: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kubelet_port = free_port()
        self.tls_dir = os.path.join(self.root, "kubelet-tls")
        self.client_ca = client_ca

    def command(self) -> list[str]:
        settings = json.dumps({"port": self.kubelet_port, "tls_dir": self.tls_dir, "client_ca": self.client_ca})
        code = f"import sys; sys.path.insert(0, {ROOT!r}); from tests.integration.kubelet_node import main; main()"
        return [sys.executable, "-c", code, self.config_path, settings]


def main() -> None:
    """``CONFIG SETTINGS``: the daemon of CONFIG and its kubelet listener, until SIGTERM."""
    from twisted.internet import reactor
    from twisted.internet.threads import deferToThreadPool

    from tests.cluster.kubelet.fakes import FakeResolver

    from vmservice.cluster.kubelet.site import KubeletListener, kubelet_site
    from vmservice.cluster.kubelet.tls import KubeletTls, KubeletTlsConfig
    from vmservice.config import load_config
    from vmservice.nodes.fleet import Fleet
    from vmservice.service import IDaemonReactor, make_service
    from vmservice.service.kubelet_port import console_paths

    os.umask(0o077)
    config_path, settings = sys.argv[1], json.loads(sys.argv[2])
    config = load_config(config_path)
    top = make_service(config, cast(IDaemonReactor, reactor))

    def fleets(service: Any) -> list[Fleet]:
        if isinstance(service, Fleet):
            return [service]
        return [found for child in getattr(service, "services", ()) for found in fleets(child)]

    fleet = fleets(top)[0]

    tls = KubeletTls(KubeletTlsConfig("node-a", "127.0.0.1", "localhost", settings["tls_dir"],
                                      client_ca_file=settings["client_ca"]), datetime.datetime.now(datetime.timezone.utc))
    resolver = FakeResolver()
    site = kubelet_site(reactor, resolver, fleet, console_paths(config, fleet), config.console_log_size,
                        lambda call: deferToThreadPool(reactor, reactor.getThreadPool(), call), tls, resolver.pods)
    KubeletListener(reactor, site, tls, "127.0.0.1", settings["port"]).setServiceParent(top)
    top.startService()
    reactor.addSystemEventTrigger("before", "shutdown", top.stopService)
    reactor.run()


__all__ = ["KubeletDaemon", "certificates", "main"]
