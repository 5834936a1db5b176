# -*- test-case-name: tests.cluster.test_pod_spec -*-
"""
A Pod bound to this node as the VM it asks for (pure): :func:`parse_spec`
reads the pod into a frozen :class:`PodSpec` or refuses it with a
:class:`PodRejected` whose reason and message the pod's ``Failed`` status
carries.  Nothing a pod holds makes it raise anything else (docs/cluster.md,
"Pods as VMs", is the mapping):

- exactly one container, no init containers (else ``Unsupported``);
- the host group: the annotation ``vmservice.io/group``, else the
  container's image (``vmservice.io/group/NAME``, an image ``images`` maps,
  or a bare group's name), else ``default_group`` (else ``UnknownGroup``);
- ``resources.limits`` (else ``requests``): ``cpu`` → vCPUs (whole cores,
  rounded up), ``memory`` → RAM bytes, within the group's
  (``OverGroupLimits``; an unreadable quantity is ``InvalidResources``);
- annotations ``vmservice.io/userdata``, ``vmservice.io/ssh-keys`` (one a
  line), ``vmservice.io/persistent`` (``"true"``);
- the container's ``env`` (plain values) and the Secrets it names
  (``env[].valueFrom.secretKeyRef``, ``envFrom[].secretRef``), which the
  controller reads through the API; a ConfigMap or field reference is
  ``Unsupported``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from attrs import frozen

from ..config import MAX_USERDATA, HostGroupConfig, KubernetesConfig
from ..nodes.model import MAX_SSH_KEY_LENGTH, MAX_SSH_KEYS
from .api_client import Json
from .pod_object import PodKey, pod_key
from .quantity import QuantityError, parse_quantity

#: The annotations a VM pod is configured by.
GROUP, USERDATA, SSH_KEYS, PERSISTENT = ("vmservice.io/group", "vmservice.io/userdata", "vmservice.io/ssh-keys",
                                         "vmservice.io/persistent")
#: An image that names a host group: ``vmservice.io/group/NAME``.
GROUP_IMAGE = "vmservice.io/group/"
#: The most environment variables, and ``envFrom`` entries, of a pod's container.
MAX_ENV, MAX_ENV_FROM = 256, 32
#: An environment variable's name as the VM's shell takes it.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: A Secret's name and key as the API allows them.
_SECRET_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


class PodRejected(ValueError):
    """
    The pod cannot be run as a VM: it fails with ``reason`` (one CamelCase
    word, as Kubernetes' reasons are) and ``message``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(reason, message)
        self.reason, self.message = reason, message[:500]

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


@frozen
class SecretKeyRef:
    """``env[].valueFrom.secretKeyRef``: variable ``env`` is key ``key`` of Secret ``secret``."""

    env: str
    secret: str
    key: str
    optional: bool = False


@frozen
class SecretEnvFrom:
    """``envFrom[].secretRef``: every key of Secret ``secret`` a variable, named ``prefix`` + key."""

    secret: str
    prefix: str = ""
    optional: bool = False


@frozen
class PodSpec:
    """
    The VM a pod asks for.

    :ivar key: which pod.
    :ivar container: the container's name (its VM's, for logs and exec).
    :ivar group: the host group.
    :ivar cpus: vCPUs (``None``: the group's).
    :ivar ram_bytes: memory (``None``: the group's).
    :ivar persistent: the VM is kept (stopped) when it ends.
    :ivar userdata: a script run at the VM's first boot.
    :ivar ssh_keys: the login user's authorized keys.
    :ivar env: plain environment variables, in order.
    :ivar secret_env: variables read from Secrets.
    :ivar secret_env_from: Secrets whose every key is a variable.
    """

    key: PodKey
    container: str
    group: str
    cpus: int | None = None
    ram_bytes: int | None = None
    persistent: bool = False
    userdata: str = ""
    ssh_keys: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[SecretKeyRef, ...] = ()
    secret_env_from: tuple[SecretEnvFrom, ...] = ()

    @property
    def secrets(self) -> tuple[str, ...]:
        """The Secrets named, each once, in order."""
        names = [ref.secret for ref in self.secret_env] + [ref.secret for ref in self.secret_env_from]
        return tuple(dict.fromkeys(names))


def _dict(value: Any, what: str) -> Json:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodRejected("Malformed", f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodRejected("Malformed", f"{what} is not a list")
    return value


def _text(value: Any, what: str, most: int) -> str:
    if not isinstance(value, str):
        raise PodRejected("Malformed", f"{what} is not a string")
    if len(value) > most:
        raise PodRejected("Unsupported", f"{what} is longer than {most} characters")
    return value


def _group(annotations: Json, container: Json, groups: Mapping[str, HostGroupConfig], config: KubernetesConfig) -> str:
    named = annotations.get(GROUP)
    if named is not None:
        group = _text(named, f"annotation {GROUP}", 128)
    else:
        image = container.get("image")
        image = image if isinstance(image, str) else ""
        mapped = dict(config.images)
        if image.startswith(GROUP_IMAGE):
            group = image[len(GROUP_IMAGE):]
        elif image in mapped:
            group = mapped[image]
        elif image in groups:
            group = image
        elif config.default_group is not None:
            group = config.default_group
        else:
            raise PodRejected("UnknownGroup", f"the image {image[:100]!r} names no host group, and no default_group "
                                              f"is configured (groups: {', '.join(groups)})")
    if group not in groups:
        raise PodRejected("UnknownGroup", f"no host group {group[:100]!r} on this node (groups: {', '.join(groups)})")
    return group


def _resources(container: Json, group: HostGroupConfig) -> tuple[int | None, int | None]:
    resources = _dict(container.get("resources"), "resources")
    limits, requests = _dict(resources.get("limits"), "limits"), _dict(resources.get("requests"), "requests")
    found: dict[str, int | None] = {}
    for name in ("cpu", "memory"):
        text = limits.get(name, requests.get(name))
        if text is None:
            found[name] = None
            continue
        try:
            value = parse_quantity(_text(text, f"resources {name}", 64))
        except QuantityError as error:
            raise PodRejected("InvalidResources", f"{name}: {error}") from None
        found[name] = max(1, math.ceil(value))
    cpus, ram = found["cpu"], found["memory"]
    if (cpus is not None and cpus > group.vcpu) or (ram is not None and ram > group.ram_bytes):
        raise PodRejected("OverGroupLimits", f"host group {group.name!r} gives a VM at most {group.vcpu} CPU(s) and "
                                             f"{group.ram_bytes // 2**20}Mi of memory")
    return cpus, ram


def _env(container: Json) -> tuple[tuple[tuple[str, str], ...], tuple[SecretKeyRef, ...], tuple[SecretEnvFrom, ...]]:
    env, refs, env_from = [], [], []
    entries, sources = _list(container.get("env"), "env"), _list(container.get("envFrom"), "envFrom")
    if len(entries) > MAX_ENV or len(sources) > MAX_ENV_FROM:
        raise PodRejected("Unsupported", f"at most {MAX_ENV} env and {MAX_ENV_FROM} envFrom entries")
    for entry in entries:
        entry = _dict(entry, "an env entry")
        name = _text(entry.get("name"), "an env name", 128)
        if not ENV_NAME.fullmatch(name):
            raise PodRejected("Unsupported", f"env name {name[:60]!r}: letters, digits and '_' only")
        source = _dict(entry.get("valueFrom"), f"env {name}'s valueFrom")
        if not source:
            env.append((name, _text(entry.get("value", ""), f"env {name}'s value", 64 * 1024)))
            continue
        ref = _dict(source.get("secretKeyRef"), f"env {name}'s secretKeyRef")
        if not ref or len(source) != 1:
            raise PodRejected("Unsupported", f"env {name}: only secretKeyRef is supported in valueFrom")
        secret, key = _text(ref.get("name"), "a secret's name", 253), _text(ref.get("key"), "a secret's key", 253)
        if not _SECRET_NAME.fullmatch(secret) or not _SECRET_KEY.fullmatch(key):
            raise PodRejected("Malformed", f"env {name}: bad secret name or key")
        refs.append(SecretKeyRef(name, secret, key, ref.get("optional") is True))
    for source in sources:
        source = _dict(source, "an envFrom entry")
        ref = _dict(source.get("secretRef"), "envFrom's secretRef")
        if not ref:
            raise PodRejected("Unsupported", "envFrom: only secretRef is supported")
        secret = _text(ref.get("name"), "a secret's name", 253)
        prefix = _text(source.get("prefix", ""), "envFrom's prefix", 64)
        if not _SECRET_NAME.fullmatch(secret) or (prefix and not ENV_NAME.fullmatch(prefix)):
            raise PodRejected("Malformed", "envFrom: bad secret name or prefix")
        env_from.append(SecretEnvFrom(secret, prefix, ref.get("optional") is True))
    return tuple(env), tuple(refs), tuple(env_from)


def _ssh_keys(annotations: Json) -> tuple[str, ...]:
    text = _text(annotations.get(SSH_KEYS, ""), f"annotation {SSH_KEYS}", MAX_SSH_KEYS * MAX_SSH_KEY_LENGTH)
    keys = tuple(line.strip() for line in text.splitlines() if line.strip())
    if len(keys) > MAX_SSH_KEYS:
        raise PodRejected("Unsupported", f"at most {MAX_SSH_KEYS} SSH keys")
    return keys


def parse_spec(pod: Json, groups: Mapping[str, HostGroupConfig], config: KubernetesConfig) -> PodSpec:
    """
    The VM ``pod`` asks for, on a node whose host groups are ``groups``.

    :raise PodRejected: it cannot be run (malformed, unsupported, beyond its group).
    """
    if not isinstance(pod, dict):
        raise PodRejected("Malformed", "the pod is not an object")
    key = pod_key(pod)
    if key is None:
        raise PodRejected("Malformed", "the pod has no namespace, name or uid")
    metadata, spec = _dict(pod.get("metadata"), "metadata"), _dict(pod.get("spec"), "spec")
    annotations = _dict(metadata.get("annotations"), "annotations")
    containers = _list(spec.get("containers"), "containers")
    if len(containers) != 1 or _list(spec.get("initContainers"), "initContainers"):
        raise PodRejected("Unsupported", f"a VM pod has exactly one container and no init containers "
                                         f"(this one has {len(containers)})")
    container = _dict(containers[0], "the container")
    name = _text(container.get("name", ""), "the container's name", 63)
    group = _group(annotations, container, groups, config)
    cpus, ram_bytes = _resources(container, groups[group])
    persistent = _text(annotations.get(PERSISTENT, "false"), f"annotation {PERSISTENT}", 8)
    if persistent not in ("true", "false"):
        raise PodRejected("Malformed", f"annotation {PERSISTENT} is \"true\" or \"false\"")
    userdata = _text(annotations.get(USERDATA, ""), f"annotation {USERDATA}", MAX_USERDATA)
    env, refs, env_from = _env(container)
    return PodSpec(key=key, container=name, group=group, cpus=cpus, ram_bytes=ram_bytes,
                   persistent=persistent == "true", userdata=userdata, ssh_keys=_ssh_keys(annotations), env=env,
                   secret_env=refs, secret_env_from=env_from)


__all__ = ["ENV_NAME", "GROUP", "GROUP_IMAGE", "PERSISTENT", "PodRejected", "PodSpec", "SSH_KEYS", "SecretEnvFrom",
           "SecretKeyRef", "USERDATA", "parse_spec"]
