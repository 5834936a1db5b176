# -*- test-case-name: tests.cli.test_pods -*-
"""
``pod/NAME`` wherever ``vmctl`` takes a node: every command whose node
argument comes from :func:`~vmservice.cli.commands.add_node_argument`, and
either side of ``vmctl cp`` (``pod/NAME:PATH``).

:func:`check_pod_references` refuses a malformed reference while the
arguments are parsed (a usage error); :func:`resolve_pod_references` then
finds the pod through the Kubernetes API (the kubeconfig of ``--kubeconfig``,
``$KUBECONFIG`` or ``~/.kube/config``; see :mod:`vmservice.client.pods`) and
rewrites the options so that the command runs against the API of the host
that runs the pod's VM, with the VM's hostname.  The token is the one
``vmctl`` would send anyway (``--token``, ``--token-file``,
``$VMSERVICE_TOKEN``); an explicit ``--url`` with a pod is refused (the pod
says where its host is), ``$VMSERVICE_URL`` is overridden.
"""

from __future__ import annotations

import argparse
from typing import Callable, Mapping

from attrs import evolve

from ..client.kubeapi import KubeApi
from ..client.kubeconfig import ClusterAccess, KubeconfigError, kubeconfig_path, load_kubeconfig
from ..client.pods import ApiReader, PodLookupError, PodReference, PodTarget, parse_pod_reference, resolve_pod
from ..client.reactors import IClientReactor
from .context import Failed

__all__ = ["check_pod_references", "pod_reference", "resolve_pod_references"]

#: Makes what reads the Kubernetes API from the reactor and the kubeconfig's access (a fake in tests).
ApiFactory = Callable[[IClientReactor, ClusterAccess], ApiReader]


def pod_reference(options: argparse.Namespace) -> tuple[str, Callable[[str], None]] | None:
    """
    The pod a command names instead of a node, as written, and what puts
    the VM's hostname in its place; ``None`` when it names none.
    """
    hostname = getattr(options, "hostname", None)
    if getattr(options, "node_argument", False) and isinstance(hostname, str) and hostname.startswith("pod/"):
        return hostname, lambda name: setattr(options, "hostname", name)
    if getattr(options, "command", None) == "cp":
        for side in ("source", "destination"):
            location = getattr(options, side)
            if location.host is not None and location.host.startswith("pod/"):
                return location.host, _replacer(options, side)
    return None


def _replacer(options: argparse.Namespace, side: str) -> Callable[[str], None]:
    """What puts a hostname in the place of the pod of ``vmctl cp``'s ``side``."""
    def replace(name: str) -> None:
        setattr(options, side, evolve(getattr(options, side), host=name))
    return replace


def check_pod_references(options: argparse.Namespace, url_given: bool) -> None:
    """
    Refuse, as usage errors, a malformed ``pod/`` reference and ``--url``
    with one (``url_given``: ``--url`` was on the command line).

    :raise ValueError: the reason, for ``parser.error``.
    """
    found = pod_reference(options)
    if found is None:
        return
    parse_pod_reference(found[0])
    if url_given:
        raise ValueError(f"--url cannot be used with {found[0]}: the pod's Node names its host's API")


async def resolve_pod_references(reactor: IClientReactor, options: argparse.Namespace, environ: Mapping[str, str],
                                 api: ApiFactory = KubeApi) -> PodTarget | None:
    """
    Resolve the pod the command names (if any) and rewrite ``options``: its
    ``url`` becomes the host's API, the node argument the VM's hostname.

    :raise Failed: the kubeconfig cannot be used, or the pod leads to no VM.
    """
    found = pod_reference(options)
    if found is None:
        return None
    text, put = found
    reference = parse_pod_reference(text)
    assert isinstance(reference, PodReference)  # checked when parsed
    try:
        access = load_kubeconfig(kubeconfig_path(getattr(options, "kubeconfig", None), environ))
        target = await resolve_pod(api(reactor, access), reference, access.namespace)
    except (KubeconfigError, PodLookupError) as error:
        raise Failed(f"{text}: {error}") from None
    options.url = target.api_url
    put(target.hostname)
    return target
