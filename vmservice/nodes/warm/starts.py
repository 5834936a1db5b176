# -*- test-case-name: tests.nodes.test_fleet,tests.nodes.warm.test_cloning,tests.nodes.warm.test_forking -*-
"""
Warm start as the node core asks for it (:class:`~vmservice.nodes.warm_port.WarmStart`):
:class:`WarmStarts` joins the memory files (:mod:`.fork_memory`), the
spares' directories (:mod:`.spare`), the clones (:mod:`.cloning`), the
templates and their spare pools (:mod:`.template_supply`) and the forks
(:mod:`.forking`) behind the one protocol the fleet is given.
"""

from __future__ import annotations

import os
from typing import Iterable

from ...config import HostGroupConfig
from ...guestport.guest import IGuestConnection
from ...hypervisors.base import NetSpec
from ...images.store import Image
from ..model import NodeRecord
from ..new_nodes import NewNodes
from ..admission import Admission
from ..blocking import Blocking
from ..catalog import Catalog
from ..runtime import NodeRuntime
from ..runtime_parts import RuntimeParts
from ..warm_port import Cloned, Forks
from . import fork_memory
from .adoption import ICloneAdoption
from .cloning import Cloning
from .fork_files import collect_forks, discard_fork_states
from .forking import Forking
from .spare import remove_spare_directory
from .template_supply import TemplateSupply
from .templates import TemplateStore


class WarmStarts:
    """
    :param parts: what nodes (and so clones, spares, templates and fork children) are made with.
    :param catalog: the host groups and their images.
    :param admission: the memory budget spares and fork children must fit in.
    :param blocking: runs a fork's memory copy off the reactor.
    :param templates: the templates warm groups' nodes are cloned from;
        ``None`` for none (every node boots cold).
    :param adoption: gives each clone and fork child an identity of its own
        before anything else reaches it; ``None`` for none (no forks, no
        clones with a network).
    """

    def __init__(self, parts: RuntimeParts, catalog: Catalog, admission: Admission, blocking: Blocking,
                 templates: TemplateStore | None = None, adoption: ICloneAdoption | None = None) -> None:
        self._parts = parts
        self._catalog = catalog
        self._admission = admission
        self._blocking = blocking
        self._supply = TemplateSupply(parts, catalog, admission, templates, adoption)
        config = parts.config
        self._memory_directory = fork_memory.memory_directory(config.state_dir, config.templates_tmpfs_dir)

    # -- a VM's start and end (runtime) -----------------------------------

    def before_start(self, record: NodeRecord) -> None:
        fork_memory.prepare(record)

    def after_end(self, record: NodeRecord) -> bool:
        return fork_memory.release(record)

    def spare_replaced(self, started_qmp: str) -> None:
        remove_spare_directory(started_qmp)

    # -- a new node (creation) ---------------------------------------------

    def memory_file(self, hostname: str, kind: str) -> str:
        config = self._parts.config
        return fork_memory.memory_file(config.state_dir, config.templates_tmpfs_dir, hostname, kind)

    async def clone(self, node: NodeRuntime, group: HostGroupConfig, image: Image,
                    net: NetSpec | None) -> Cloned | None:
        cloned = await Cloning(self._supply).start(node, group, image, net)
        if cloned is None:
            return None
        machine, agent = cloned
        return machine, agent, self._supply.adoption is not None

    def ready_for_forks(self, hostname: str, agent: IGuestConnection) -> None:
        fork_memory.ready_for_forks(hostname, agent, self._supply.adoption)

    # -- the fleet -------------------------------------------------------------

    async def prepare(self, group: HostGroupConfig) -> None:
        await self._supply.prepare(group)

    def room_freed(self) -> None:
        self._supply.room_freed()

    def spare_ram(self) -> Iterable[int]:
        templates = self._supply.templates
        return templates.spare_ram() if templates is not None else []

    def forks(self, new: NewNodes) -> Forks:
        return Forking(new, self._blocking, self._supply.adoption)

    @property
    def vm_directory(self) -> str | None:
        templates = self._supply.templates
        return templates.directory if templates is not None else None

    # -- files no node names (leftovers) and the stop ----------------------

    def collect_templates(self, records: list[NodeRecord]) -> None:
        templates = self._supply.templates
        if templates is not None:
            templates.collect({record.frozen_disk for record in records if record.frozen_disk},
                              {os.path.dirname(record.started_qmp) for record in records if record.started_qmp})

    def collect_forks(self, referenced: set[str]) -> None:
        collect_forks(self._parts.config.state_dir, referenced)

    def collect_copies(self, nodes: list[tuple[NodeRecord, bool]]) -> None:
        fork_memory.collect_copies(self._memory_directory, fork_memory.kept_files(nodes)[1])

    def sweep(self, nodes: list[tuple[NodeRecord, bool]]) -> None:
        config = self._parts.config
        discard_fork_states(config.state_dir, config.templates_tmpfs_dir)
        fork_memory.sweep(self._memory_directory, set.union(*fork_memory.kept_files(nodes, forking=False)))

    def close(self) -> None:
        fork_memory.close(self._memory_directory)
        if self._supply.templates is not None:
            self._supply.templates.close()


__all__ = ["WarmStarts"]
