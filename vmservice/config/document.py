# -*- test-case-name: tests.config.test_document -*-
"""
How the file writes what :class:`~vmservice.config.model.Config` and
:class:`~vmservice.config.model.HostGroupConfig` mean, where the file's shape
is not the record's: the keys both share are declared once, in
:class:`~vmservice.config.model.RootKeys` and
:class:`~vmservice.config.model.GroupKeys`, and the documents add only the
others.  A group gives its RAM as one of three keys (``ram_gb``, ``ram_mb``,
``ram_bytes``), may leave ``image``, ``hypervisor`` and
``graceful_shutdown`` to the top level, and writes ``idle_suspend`` as a
duration; the root may leave ``image_dir`` to the environment and writes
its groups and its ``kubernetes`` and ``e2b`` sections as documents.  ``None`` means "not given" where the meaning of
absence is decided later (inheritance, the environment, "exactly one of").
Every other section is read straight into its record
(:mod:`vmservice.config.model`).
"""

from __future__ import annotations

from typing import Any

import attrs

from .e2b import E2bConfig, E2bDocument
from .kubernetes import KubernetesConfig, KubernetesDocument
from .model import Config, GroupKeys, HostGroupConfig, RootKeys


def _shared(keys: type[RootKeys] | type[GroupKeys], document: RootKeys | GroupKeys) -> dict[str, Any]:
    """
    The values of ``document`` under the keys of ``keys`` (the keys it shares
    with its record), as keyword arguments of the resolved record.
    """
    return {field.name: getattr(document, field.name) for field in attrs.fields(keys)}


@attrs.frozen(kw_only=True)
class GroupDocument(GroupKeys):
    """One entry of ``config.host_groups`` key for key, as the file writes it."""

    ram_gb: int | None = None
    ram_mb: int | None = None
    ram_bytes: int | None = None
    image: str | None = None
    hypervisor: str | None = None
    graceful_shutdown: bool | None = None
    idle_suspend: str | None = None
    agent_transport: str | None = None

    def record(
        self, *, ram_bytes: int, image: str, hypervisor: str, graceful_shutdown: bool, idle_suspend: float | None,
        agent_transport: str,
    ) -> HostGroupConfig:
        """The group's record: its shared keys as they are, the others as resolved."""
        return HostGroupConfig(
            **_shared(GroupKeys, self),
            ram_bytes=ram_bytes,
            image=image,
            hypervisor=hypervisor,
            graceful_shutdown=graceful_shutdown,
            idle_suspend=idle_suspend,
            agent_transport=agent_transport,
        )


@attrs.frozen(kw_only=True)
class ConfigDocument(RootKeys):
    """The ``config:`` section key for key, as the file writes it."""

    image_dir: str | None = None
    host_groups: tuple[GroupDocument, ...] = ()
    kubernetes: KubernetesDocument | None = None
    e2b: E2bDocument | None = None

    def record(self, *, image_dir: str, host_groups: tuple[HostGroupConfig, ...],
               kubernetes: KubernetesConfig | None = None, e2b: E2bConfig | None = None) -> Config:
        """
        The whole record: the shared keys as they are, ``image_dir``, the
        groups, ``kubernetes`` and ``e2b`` as resolved.
        """
        return Config(**_shared(RootKeys, self), image_dir=image_dir, host_groups=host_groups, kubernetes=kubernetes,
                      e2b=e2b)
