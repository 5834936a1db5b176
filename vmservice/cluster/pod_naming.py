# -*- test-case-name: tests.cluster.test_pod_parts -*-
"""
What a pod's VM is called and tagged (pure), in one place: the tags that
tie a VM to its Pod, so that a restarted daemon finds the VMs it made for
pods and adopts them, and the VM's hostname.

Tags are 1 to 256 characters without control characters
(:func:`~vmservice.nodes.model.tag_problem`); a namespace is at most 63, a
pod's name at most 253 and a uid 36:

- ``vmservice.io/pod=<namespace>/<name>``, cut at 256 characters (it is
  for people and logs: the uid alone says which pod a VM is for)
- ``vmservice.io/pod-uid=<uid>``
- ``vmservice.io/pod-node=<node name>`` (the Node it was made on)

The hostname is the pod's name made a host label (``.`` → ``-``, at most
63 characters); when a node of that name exists already, the name is cut
and the uid's first characters added, ``<name>-<uid5>``.
"""

from __future__ import annotations

import re
from typing import Callable

from attrs import frozen

from ..nodes.model import MAX_TAG_LENGTH, tag_problem, valid_hostname
from .pod_object import PodKey

#: The tag prefixes of a pod's VM.
POD_TAG, UID_TAG, NODE_TAG = "vmservice.io/pod=", "vmservice.io/pod-uid=", "vmservice.io/pod-node="
#: The env file's secret of a pod's VM: ``pod-<uid>.env`` in the secrets store, ``/run/secrets/`` in the guest.
ENV_SECRET_PREFIX, ENV_SECRET_SUFFIX = "pod-", ".env"


@frozen
class PodTags:
    """What a VM's tags say of the pod it was made for."""

    key: PodKey
    node_name: str


def pod_tags(key: PodKey, node_name: str) -> tuple[str, ...]:
    """The tags of the VM made for pod ``key`` on Node ``node_name``."""
    tags = (f"{POD_TAG}{key.namespace}/{key.name}"[:MAX_TAG_LENGTH], f"{UID_TAG}{key.uid}", f"{NODE_TAG}{node_name}")
    assert all(tag_problem(tag) is None for tag in tags)
    return tags


def read_tags(tags: tuple[str, ...]) -> PodTags | None:
    """The pod a VM's ``tags`` name, or ``None`` when it was not made for a pod (or its tags were changed)."""
    found: dict[str, str] = {}
    for tag in tags:
        for prefix in (POD_TAG, UID_TAG, NODE_TAG):
            if tag.startswith(prefix) and prefix not in found:
                found[prefix] = tag[len(prefix):]
    if len(found) != 3:
        return None
    namespace, slash, name = found[POD_TAG].partition("/")
    if not (slash and namespace and name and found[UID_TAG]):
        return None
    return PodTags(PodKey(namespace, name, found[UID_TAG]), found[NODE_TAG])


def _label(text: str, most: int) -> str:
    label = re.sub(r"[^a-z0-9-]", "-", text.lower())[:most].strip("-")
    return label or "pod"


def vm_hostname(key: PodKey, taken: Callable[[str], bool]) -> str:
    """The hostname of pod ``key``'s VM: its name as a host label, else with its uid's start when ``taken``."""
    plain = _label(key.name, 63)
    if not taken(plain):
        return plain
    suffix = "x"
    for length in (5, 8, 12):
        suffix = re.sub(r"[^a-z0-9]", "", key.uid.lower())[:length] or "x"
        named = f"{_label(key.name, 62 - len(suffix))}-{suffix}"
        if not taken(named):
            assert valid_hostname(named)
            return named
    return f"{_label(key.name, 62 - len(suffix))}-{suffix}"  # taken too: the create says so


def env_secret(uid: str) -> str:
    """The name of the secret that holds the environment of pod ``uid``'s VM."""
    return f"{ENV_SECRET_PREFIX}{re.sub(r'[^A-Za-z0-9-]', '', uid)[:64]}{ENV_SECRET_SUFFIX}"


__all__ = ["ENV_SECRET_PREFIX", "ENV_SECRET_SUFFIX", "NODE_TAG", "POD_TAG", "PodTags", "UID_TAG", "env_secret", "pod_tags", "read_tags", "vm_hostname"]
