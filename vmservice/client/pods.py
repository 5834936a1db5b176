# -*- test-case-name: tests.client.test_pods -*-
"""
From a VM pod to the vmservice API that runs its VM: ``pod/NAME`` or
``pod/NAMESPACE/NAME`` (:func:`parse_pod_reference`) resolved through the
Kubernetes API (:func:`resolve_pod`) to a :class:`PodTarget`, the host's API
URL and the VM's hostname.

The pod names its Node (``spec.nodeName``) and its VM
(``status.containerStatuses[0].containerID``, ``vmservice://HOSTNAME``); the
Node names its host's API (the annotation ``vmservice.io/api``, which a node
sets on itself: the NodeRestriction admission plugin keeps it from
annotating its pods).  Every step that finds something else is a
:class:`PodLookupError` saying which.
"""

from __future__ import annotations

import re
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from attrs import frozen

from .kubeapi import KubeApiError

__all__ = ["API_ANNOTATION", "ApiReader", "CONTAINER_SCHEME", "POD_PREFIX", "PodLookupError", "PodReference", "PodTarget",
           "parse_pod_reference", "resolve_pod"]

#: How a node argument names a pod instead.
POD_PREFIX = "pod/"
#: The Node's annotation holding its host's vmservice API URL.
API_ANNOTATION = "vmservice.io/api"
#: How a VM pod's containerID starts, the VM's hostname after it.
CONTAINER_SCHEME = "vmservice://"

#: A DNS-1123 subdomain (a pod's or a Node's name).
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: A DNS-1123 label (a namespace).
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: A VM's hostname as the daemon names them.
_HOSTNAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?")


class PodLookupError(Exception):
    """The pod does not lead to a VM; the text says where the way stopped."""


class ApiReader(Protocol):
    """What reads the Kubernetes API: :class:`~vmservice.client.kubeapi.KubeApi` (a fake in tests)."""

    async def get(self, path: str) -> dict[str, Any]:
        """The JSON object at ``path``; :raise KubeApiError:"""


@frozen
class PodReference:
    """
    A pod named on the command line.

    :ivar name: its name.
    :ivar namespace: its namespace, or ``None`` for the kubeconfig context's.
    """

    name: str
    namespace: str | None = None


@frozen
class PodTarget:
    """
    Where a pod's VM is reached.

    :ivar api_url: the vmservice API of the host that runs it.
    :ivar hostname: the VM's hostname there.
    :ivar node: the Node the pod is bound to.
    """

    api_url: str
    hostname: str
    node: str


def parse_pod_reference(text: str) -> PodReference | None:
    """
    ``pod/NAME`` or ``pod/NAMESPACE/NAME`` as a :class:`PodReference`;
    ``None`` for any text that does not start with ``pod/`` (a hostname).

    :raise ValueError: it starts with ``pod/`` but names no pod.
    """
    if not text.startswith(POD_PREFIX):
        return None
    parts = text[len(POD_PREFIX):].split("/")
    if len(parts) > 2:
        raise ValueError(f"{text!r}: expected pod/NAME or pod/NAMESPACE/NAME")
    name, namespace = parts[-1], (parts[0] if len(parts) == 2 else None)
    if len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        raise ValueError(f"{text!r}: {name!r} is not a pod name (lower-case letters, digits, - and .)")
    if namespace is not None and not _LABEL.fullmatch(namespace):
        raise ValueError(f"{text!r}: {namespace!r} is not a namespace (lower-case letters, digits and -)")
    return PodReference(name, namespace)


def _field(document: Any, *keys: str | int) -> Any:
    """``document[keys[0]][keys[1]]...``, or ``None`` where a step is missing or of another type."""
    for key in keys:
        if isinstance(key, int):
            document = document[key] if isinstance(document, list) and len(document) > key else None
        else:
            document = document.get(key) if isinstance(document, dict) else None
    return document


def api_url(value: object, node: str) -> str:
    """The Node's ``vmservice.io/api`` annotation as a URL; :raise PodLookupError: it is not an http(s) URL."""
    if not isinstance(value, str) or not value:
        raise PodLookupError(f"the Node {node} has no {API_ANNOTATION} annotation: it is not a vmservice host")
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        parts = None
    if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.username
            or parts.password or parts.query or parts.fragment or len(value) > 2048):
        raise PodLookupError(f"the Node {node}'s {API_ANNOTATION} annotation is not an http(s) URL: {value[:200]!r}")
    return value.strip().rstrip("/")


def vm_hostname(pod: dict[str, Any], described: str) -> str:
    """The VM's hostname from the pod's containerID; :raise PodLookupError: it has none (yet) or another runtime's."""
    container = _field(pod, "status", "containerStatuses", 0, "containerID")
    if not isinstance(container, str) or not container:
        phase = _field(pod, "status", "phase")
        raise PodLookupError(f"the pod {described} has no VM yet (phase {phase if isinstance(phase, str) else '?'}, "
                             "no containerID): try again once it runs")
    if not container.startswith(CONTAINER_SCHEME):
        scheme = container.partition("://")[0][:40]
        raise PodLookupError(f"the pod {described} is not a vmservice pod (its container runs on {scheme!r})")
    hostname = container[len(CONTAINER_SCHEME):]
    if not _HOSTNAME.fullmatch(hostname):
        raise PodLookupError(f"the pod {described}'s containerID names no hostname: {container[:200]!r}")
    return hostname


async def _get(api: ApiReader, path: str, missing: str) -> dict[str, Any]:
    """The object at ``path``; a 404 is the error ``missing``, any other failure the API's."""
    try:
        return await api.get(path)
    except KubeApiError as error:
        if error.status == 404:
            raise PodLookupError(missing) from None
        raise PodLookupError(str(error)) from None


async def resolve_pod(api: ApiReader, reference: PodReference, namespace: str) -> PodTarget:
    """
    Where the VM of the pod ``reference`` runs (in ``namespace`` unless it
    names its own).

    :raise PodLookupError: the pod or its Node cannot be read, the pod is not
        bound yet, has no VM yet, is not a vmservice pod, or its Node names no
        vmservice API.
    """
    namespace = reference.namespace or namespace
    described = f"{namespace}/{reference.name}"
    pod = await _get(api, f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(reference.name, safe='')}",
                     f"no pod {described} (pod/NAMESPACE/NAME names another namespace)")
    node = _field(pod, "spec", "nodeName")
    if not isinstance(node, str) or not node:
        raise PodLookupError(f"the pod {described} is not bound to a node yet (Pending): try again once it is "
                             "scheduled")
    if len(node) > 253 or not _SUBDOMAIN.fullmatch(node):
        raise PodLookupError(f"the pod {described}'s nodeName is not a Node's name: {node[:100]!r}")
    found = await _get(api, f"/api/v1/nodes/{quote(node, safe='')}",
                       f"the pod {described} is bound to the Node {node}, which does not exist")
    url = api_url(_field(found, "metadata", "annotations", API_ANNOTATION), node)
    return PodTarget(api_url=url, hostname=vm_hostname(pod, described), node=node)
