# -*- test-case-name: tests.cluster.test_pod_parts -*-
"""
A pod's environment for its VM (pure): the container's plain ``env`` and
the values of the Secrets it names, as one shell file of ``export NAME='value'``
lines.  The VM gets it as a secret of the daemon's secrets store
(``/run/secrets/pod-<uid>.env`` in the guest, mode 0600: see
:func:`~.pod_naming.env_secret`), and its userdata starts by reading it, so
the pod's userdata runs with the pod's environment.  Kubernetes' order
holds: ``envFrom`` first, then ``env`` (a later name replaces an earlier).
"""

from __future__ import annotations

import base64
import binascii

from .api_client import Json
from .pod_spec import ENV_NAME, PodRejected, PodSpec

#: The most bytes of a pod's environment file.
MAX_ENV_FILE = 256 * 1024


def secret_values(secret: Json) -> dict[str, bytes]:
    """
    A Secret's ``data`` (base64) and ``stringData`` decoded.

    :raise PodRejected: (``InvalidSecret``) a value is not base64.
    """
    values: dict[str, bytes] = {}
    data = secret.get("data")
    for key, value in (data.items() if isinstance(data, dict) else ()):
        if isinstance(key, str) and isinstance(value, str):
            try:
                values[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise PodRejected("InvalidSecret", f"key {key[:60]!r} of a Secret is not base64") from None
    return values


def environment(spec: PodSpec, secrets: dict[str, dict[str, bytes] | None]) -> tuple[tuple[str, str], ...]:
    """
    The pod's variables, in order, from its plain ``env`` and ``secrets``
    (each Secret's values by name; ``None``: there is no such Secret).

    :raise PodRejected: a Secret or key that is not optional is missing
        (``SecretNotFound``), or a value is not UTF-8 (``InvalidSecret``).
    """
    found: dict[str, str] = {}

    def value(secret: str, key: str, optional: bool, data: bytes | None) -> str | None:
        if data is None:
            if optional:
                return None
            raise PodRejected("SecretNotFound", f"Secret {secret!r} has no key {key[:60]!r}"
                              if secrets.get(secret) is not None else f"Secret {secret!r} not found")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise PodRejected("InvalidSecret", f"key {key[:60]!r} of Secret {secret!r} is not text") from None

    for source in spec.secret_env_from:
        values = secrets.get(source.secret)
        if values is None and not source.optional:
            raise PodRejected("SecretNotFound", f"Secret {source.secret!r} not found")
        for key, data in sorted((values or {}).items()):
            name = source.prefix + key
            text = value(source.secret, key, True, data) if ENV_NAME.fullmatch(name) else None
            if text is not None:
                found[name] = text
    plain = dict(spec.env)
    refs = {ref.env: ref for ref in spec.secret_env}
    for name in [*plain, *refs]:
        found.pop(name, None)
    for name, text in spec.env:
        found[name] = text
    for ref in spec.secret_env:
        text = value(ref.secret, ref.key, ref.optional, (secrets.get(ref.secret) or {}).get(ref.key))
        if text is not None:
            found[ref.env] = text
    return tuple(found.items())


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def env_file(variables: tuple[tuple[str, str], ...]) -> bytes:
    """
    The shell file of ``variables``; :raise PodRejected: (``EnvironmentTooLarge``)
    more than :data:`MAX_ENV_FILE` bytes, or a value holds a NUL.
    """
    lines = []
    for name, text in variables:
        if "\0" in text:
            raise PodRejected("InvalidSecret", f"the value of {name} holds a NUL character")
        lines.append(f"export {name}={_quoted(text)}\n")
    data = "".join(lines).encode("utf-8")
    if len(data) > MAX_ENV_FILE:
        raise PodRejected("EnvironmentTooLarge", f"the environment is {len(data)} bytes; at most {MAX_ENV_FILE}")
    return data


def sourcing(secret_name: str) -> str:
    """The userdata line that reads the environment file of secret ``secret_name``."""
    return f"set -a; . /run/secrets/{secret_name}; set +a"


__all__ = ["MAX_ENV_FILE", "env_file", "environment", "secret_values", "sourcing"]
