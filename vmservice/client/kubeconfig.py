# -*- test-case-name: tests.client.test_kubeconfig -*-
"""
What ``vmctl`` takes of a user's kubeconfig to find a pod: the current
context's cluster, user and namespace, as one :class:`ClusterAccess`.

Which file: ``--kubeconfig``, else the first file of ``$KUBECONFIG`` (a
colon-separated list, as kubectl reads it; the files are not merged), else
``~/.kube/config`` (:func:`kubeconfig_path`).  Supported: the cluster's
``server`` (``https`` only) with ``certificate-authority`` or
``certificate-authority-data`` (neither: the system's trusted CAs); the
user's ``token`` or ``tokenFile``, and a client certificate
(``client-certificate``/``client-certificate-data`` with
``client-key``/``client-key-data``); the context's ``namespace``.  What else
a kubeconfig may say that changes who is trusted or who speaks (``exec``
and ``auth-provider`` plugins, basic auth, impersonation,
``insecure-skip-tls-verify``, a proxy, ``tls-server-name``) is refused by
name.  Every file is read with a bound; the credentials stay in memory (the
TLS layer loads them from there: nothing is written to disk).
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any, Callable, Mapping

import yaml
from attrs import frozen

__all__ = ["ClusterAccess", "KubeconfigError", "MAX_FILE", "kubeconfig_path", "load_kubeconfig", "parse_kubeconfig"]

#: The most bytes read of a kubeconfig, a CA, a token, a certificate or a key file.
MAX_FILE = 1 << 20

#: What a kubeconfig's user may say that ``vmctl`` does not do, by name.
_REFUSED_USER = ("exec", "auth-provider", "username", "password", "as", "as-uid", "as-groups", "as-user-extra")
#: What a kubeconfig's cluster may say that ``vmctl`` does not do, by name.
_REFUSED_CLUSTER = ("insecure-skip-tls-verify", "proxy-url", "tls-server-name")

#: Reads a file named in a kubeconfig, at most ``MAX_FILE`` bytes: ``(path) -> bytes``; raises ``OSError``.
FileReader = Callable[[str], bytes]


class KubeconfigError(Exception):
    """The kubeconfig cannot be used; the text says which file and why."""


@frozen(repr=False)
class ClusterAccess:
    """
    How to reach the Kubernetes API as the kubeconfig's current user.

    :ivar server: the API server's ``https`` URL, without a final ``/``.
    :ivar ca_pem: the CA certificates to trust (PEM), or ``None`` for the system's.
    :ivar token: the bearer token, or ``None``.
    :ivar client_pem: the client certificate and its key (PEM, one after the other), or ``None``.
    :ivar namespace: the current context's namespace (``default`` when it names none).
    """

    server: str
    ca_pem: bytes | None
    token: str | None
    client_pem: bytes | None
    namespace: str

    def __repr__(self) -> str:
        """Names the server and the kinds of credentials, never their values."""
        return (f"ClusterAccess(server={self.server!r}, token={'yes' if self.token else 'no'}, "
                f"client_certificate={'yes' if self.client_pem else 'no'}, namespace={self.namespace!r})")


def kubeconfig_path(explicit: str | None, environ: Mapping[str, str]) -> str:
    """The kubeconfig to read: ``explicit``, the first entry of ``$KUBECONFIG``, or ``~/.kube/config``."""
    if explicit:
        return os.path.expanduser(explicit)
    for entry in environ.get("KUBECONFIG", "").split(os.pathsep):
        if entry:
            return os.path.expanduser(entry)
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".kube", "config")


def read_bounded(path: str) -> bytes:
    """The bytes of the file ``path``; :raise OSError: it cannot be read or is larger than :data:`MAX_FILE`."""
    with open(path, "rb") as stream:
        data = stream.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        raise OSError(f"larger than {MAX_FILE} bytes")
    return data


def load_kubeconfig(path: str, read: FileReader = read_bounded) -> ClusterAccess:
    """The current context of the kubeconfig file ``path`` (:func:`parse_kubeconfig`)."""
    try:
        text = read(path).decode("utf-8")
    except OSError as error:
        raise KubeconfigError(f"cannot read the kubeconfig {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise KubeconfigError(f"the kubeconfig {path} is not UTF-8") from None
    try:
        return parse_kubeconfig(text, os.path.dirname(os.path.abspath(path)), read)
    except KubeconfigError as error:
        raise KubeconfigError(f"the kubeconfig {path}: {error}") from None


def parse_kubeconfig(text: str, directory: str, read: FileReader = read_bounded) -> ClusterAccess:
    """
    The current context of the kubeconfig ``text``, the files it names
    (relative to ``directory``) read with ``read``.

    :raise KubeconfigError: it is not a kubeconfig, names a file that cannot
        be read, or says what is not supported.
    """
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise KubeconfigError(f"not YAML ({' '.join(str(error).split())[:200]})") from None
    except (ValueError, RecursionError):  # a timestamp out of range, nesting too deep
        raise KubeconfigError("not a kubeconfig YAML can read") from None
    if not isinstance(document, dict):
        raise KubeconfigError("not a kubeconfig (expected a mapping)")
    current = document.get("current-context")
    if not isinstance(current, str) or not current:
        raise KubeconfigError("no current-context")
    context = _entry(document, "contexts", "context", current)
    cluster = _entry(document, "clusters", "cluster", context.get("cluster"))
    user = _entry(document, "users", "user", context.get("user")) if context.get("user") is not None else {}
    _refuse(cluster, _REFUSED_CLUSTER, "cluster")
    _refuse(user, _REFUSED_USER, "user")
    server = _string(cluster, "server")
    if server is None:
        raise KubeconfigError("the cluster has no server")
    if not server.lower().startswith("https://"):
        raise KubeconfigError(f"the server must be an https URL, not {server[:100]!r}")
    files = _Files(directory, read)
    token = files.text(user, "token", "tokenFile")
    certificate = files.data(user, "client-certificate", "client-certificate-data")
    key = files.data(user, "client-key", "client-key-data")
    if (certificate is None) != (key is None):
        raise KubeconfigError("the user's client certificate needs its key, and the key its certificate")
    namespace = _string(context, "namespace") or "default"
    return ClusterAccess(server=server.rstrip("/"), ca_pem=files.data(cluster, "certificate-authority",
                                                                     "certificate-authority-data"),
                         token=token, client_pem=None if certificate is None or key is None else certificate + b"\n" + key,
                         namespace=namespace)


def _entry(document: Mapping[Any, Any], section: str, inner: str, name: object) -> Mapping[Any, Any]:
    """The mapping ``inner`` of the entry called ``name`` in the list ``section``."""
    entries = document.get(section)
    if not isinstance(entries, list):
        raise KubeconfigError(f"no {section} list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            found = entry.get(inner)
            if not isinstance(found, dict):
                raise KubeconfigError(f"the {inner} {str(name)[:100]!r} is not a mapping")
            return found
    raise KubeconfigError(f"no {inner} named {str(name)[:100]!r}")


def _refuse(mapping: Mapping[Any, Any], keys: tuple[str, ...], what: str) -> None:
    """Refuse the first of ``keys`` that ``mapping`` sets."""
    for key in keys:
        if mapping.get(key):
            raise KubeconfigError(f"the {what}'s {key} is not supported by vmctl")


def _string(mapping: Mapping[Any, Any], key: str) -> str | None:
    """``mapping[key]``, a non-empty string, or ``None`` when absent or empty."""
    value = mapping.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise KubeconfigError(f"{key} must be a string")
    return value.strip() or None


@frozen
class _Files:
    """Reads what a kubeconfig holds either inline or in a file named relative to ``directory``."""

    directory: str
    read: FileReader

    def _file(self, path: str, key: str) -> bytes:
        full = os.path.join(self.directory, os.path.expanduser(path))
        try:
            return self.read(full)
        except OSError as error:
            raise KubeconfigError(f"cannot read the {key} {full}: {error.strerror or error}") from None

    def data(self, mapping: Mapping[Any, Any], file_key: str, data_key: str) -> bytes | None:
        """The bytes of ``data_key`` (base64) or of the file ``file_key`` names; ``None`` for neither."""
        path, encoded = _string(mapping, file_key), _string(mapping, data_key)
        if path is not None and encoded is not None:
            raise KubeconfigError(f"both {file_key} and {data_key} are set")
        if encoded is not None:
            try:
                return base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise KubeconfigError(f"{data_key} is not base64") from None
        return None if path is None else self._file(path, file_key)

    def text(self, mapping: Mapping[Any, Any], key: str, file_key: str) -> str | None:
        """The token ``key`` holds, or the first line of the file ``file_key`` names; ``None`` for neither."""
        inline, path = _string(mapping, key), _string(mapping, file_key)
        if inline is None and path is None:
            return None
        try:
            token = inline if inline is not None else self._file(str(path), file_key).decode("ascii").strip()
        except UnicodeDecodeError:
            raise KubeconfigError(f"the {file_key} is not ASCII") from None
        if not token or any(not 0x21 <= ord(c) <= 0x7E for c in token):
            raise KubeconfigError(f"the user's {key} is empty or holds white space or control characters")
        return token
