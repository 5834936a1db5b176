# -*- test-case-name: tests.config.test_kubernetes -*-
"""
What the daemon takes of a kubeconfig file (its current context's cluster
and user) and of a token file: :func:`read_kubeconfig`, :func:`read_token`.

Supported: the cluster's ``server`` (https) with ``certificate-authority``
or ``certificate-authority-data``, the user's ``token`` or ``tokenFile``.
Everything else a kubeconfig may say of its user (client certificates,
``exec`` and ``auth-provider`` plugins, basic auth) or of its cluster
(``insecure-skip-tls-verify``, a proxy) is refused by name: the daemon
authenticates as its node with a bearer token, and trusts the configured CA
alone.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping

import attrs
import yaml

from .kubernetes import TokenSource

#: The most bytes of a kubeconfig read.
MAX_KUBECONFIG = 1024 * 1024
#: The most bytes of a token file read (service-account and bootstrap tokens are far shorter).
MAX_TOKEN = 64 * 1024
#: What a kubeconfig's user may say that the daemon does not support.
_UNSUPPORTED_USER = ("client-certificate", "client-certificate-data", "client-key", "client-key-data", "exec",
                     "auth-provider", "username", "password", "as", "as-groups")


class KubeconfigError(ValueError):
    """The kubeconfig or the token file cannot be used; the text says why."""


@attrs.frozen(kw_only=True)
class KubeconfigView:
    """
    The current context of a kubeconfig, its relative paths made absolute.

    :ivar server: The API server's URL.
    :ivar ca_file: The CA's file, or ``None`` when :attr:`ca_data` holds it.
    :ivar ca_data: The CA's PEM, from ``certificate-authority-data``.
    :ivar token: The user's ``token``, or ``None`` with :attr:`token_file`.
    :ivar token_file: The user's ``tokenFile``.
    """

    server: str
    ca_file: str | None = None
    ca_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None


def read_limited(path: str, limit: int) -> bytes:
    """The bytes of the file ``path``, at most ``limit`` (a longer one is refused); links are followed as given."""
    with open(path, "rb") as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise KubeconfigError(f"{path} is larger than {limit} bytes")
    return data


def _named(document: Mapping[str, object], section: str, name: object) -> Mapping[str, object]:
    """The entry called ``name`` of the list ``section`` (``clusters``, ``users``, ``contexts``), its inner mapping."""
    entries = document.get(section)
    if not isinstance(entries, list):
        raise KubeconfigError(f"no {section} list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            inner = entry.get(section[:-1])
            if not isinstance(inner, dict):
                raise KubeconfigError(f"{section[:-1]} {name!r} has no {section[:-1]} mapping")
            return inner
    raise KubeconfigError(f"no {section[:-1]} named {name!r}")


def _text(mapping: Mapping[str, object], key: str) -> str | None:
    """``mapping[key]`` when it is a non-empty string; ``None`` when absent."""
    value = mapping.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise KubeconfigError(f"{key} must be a non-empty string")
    return value.strip()


def _absolute(path: str | None, directory: str) -> str | None:
    """``path`` relative to the kubeconfig's ``directory`` (as kubectl reads it)."""
    return None if path is None else os.path.join(directory, path)


def read_kubeconfig(text: str, directory: str) -> KubeconfigView:
    """
    The current context of the kubeconfig ``text`` (found in ``directory``).

    :raise KubeconfigError: it is not a kubeconfig, or says what is not supported.
    """
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise KubeconfigError(f"not YAML ({' '.join(str(error).split())})") from None
    if not isinstance(document, dict):
        raise KubeconfigError("not a kubeconfig (expected a mapping)")
    current = document.get("current-context")
    if not isinstance(current, str) or not current:
        raise KubeconfigError("no current-context")
    context = _named(document, "contexts", current)
    cluster = _named(document, "clusters", context.get("cluster"))
    user = _named(document, "users", context.get("user"))
    for key in ("insecure-skip-tls-verify", "proxy-url", "tls-server-name"):
        if cluster.get(key):
            raise KubeconfigError(f"the cluster's {key} is not supported")
    for key in _UNSUPPORTED_USER:
        if user.get(key):
            raise KubeconfigError(f"the user's {key} is not supported (the node authenticates with a token or "
                                  "tokenFile)")
    server = _text(cluster, "server")
    if server is None:
        raise KubeconfigError("the cluster has no server")
    ca_file, ca_encoded = _text(cluster, "certificate-authority"), _text(cluster, "certificate-authority-data")
    if (ca_file is None) == (ca_encoded is None):
        raise KubeconfigError("the cluster needs exactly one of certificate-authority, certificate-authority-data")
    ca_data = None
    if ca_encoded is not None:
        try:
            ca_data = base64.b64decode(ca_encoded, validate=True)
        except binascii.Error:
            raise KubeconfigError("certificate-authority-data is not base64") from None
    token, token_file = _text(user, "token"), _text(user, "tokenFile")
    if (token is None) == (token_file is None):
        raise KubeconfigError("the user needs exactly one of token, tokenFile")
    return KubeconfigView(server=server, ca_file=_absolute(ca_file, directory), ca_data=ca_data, token=token,
                          token_file=_absolute(token_file, directory))


def load_kubeconfig(path: str) -> KubeconfigView:
    """The current context of the kubeconfig file ``path``; :raise OSError, KubeconfigError:"""
    try:
        text = read_limited(path, MAX_KUBECONFIG).decode("utf-8")
    except UnicodeDecodeError:
        raise KubeconfigError(f"{path} is not UTF-8") from None
    return read_kubeconfig(text, os.path.dirname(os.path.abspath(path)))


def read_token(source: TokenSource) -> str:
    """
    The node's bearer token as ``source`` holds it now (read anew each time).

    :raise OSError: the file cannot be read.
    :raise KubeconfigError: it holds no usable token.
    """
    if source.kubeconfig:
        view = load_kubeconfig(source.path)
        if view.token is None:
            raise KubeconfigError(f"{source.path}: the user has no token")
        token = view.token
    else:
        try:
            token = read_limited(source.path, MAX_TOKEN).decode("ascii").strip()
        except UnicodeDecodeError:
            raise KubeconfigError(f"{source.path} is not ASCII") from None
    if not token or any(ord(c) < 0x21 or ord(c) > 0x7E for c in token):
        raise KubeconfigError(f"{source.path}: the token is empty or holds white space or control characters")
    return token


__all__ = ["KubeconfigError", "KubeconfigView", "MAX_KUBECONFIG", "MAX_TOKEN", "load_kubeconfig", "read_kubeconfig",
           "read_limited", "read_token"]
