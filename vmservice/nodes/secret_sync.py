# -*- test-case-name: tests.nodes.test_provisioning -*-
"""
A secret changed in the store: the running nodes that hold it get it again
(their agents place the secrets as the store holds them now), each in the
background; one that cannot is logged, not retried.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from .registry import Registry

log = Logger("vmservice.nodes.fleet")


def secret_changed(registry: Registry, name: str) -> None:
    """Secret ``name`` was created, changed or deleted: place it again in the running nodes that hold it."""
    for node in registry.all():
        agent = node.agent
        if name in node.record.secrets and agent is not None and agent.connected:
            log.info("placing secret {name} again in node {hostname}", name=name, hostname=node.hostname)
            Deferred.fromCoroutine(node.provisioning.resync_secrets(agent)).addErrback(_resync_failed, node.hostname)


def _resync_failed(failure: Failure, hostname: str) -> None:
    log.error("could not place the secrets of node {hostname} again: {error}", hostname=hostname, error=failure.value)


__all__ = ["secret_changed"]
