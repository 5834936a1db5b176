# -*- test-case-name: tests.nodes.warm.test_cloning,tests.nodes.warm.test_spare -*-
"""
A warm group's supply of templates and spare VMs: the template its nodes are
cloned from (got, built once per key however many ask, ahead of the first
create when the daemon starts), and the template's pool of spare VMs, kept
filled one spare at a time while admission has room for them.
"""

from __future__ import annotations

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from ...config import HostGroupConfig
from ...hypervisors.base import IHypervisor
from ...images.store import Image
from ..admission import Admission
from ..agent_transport import machine_vsock
from ..catalog import Catalog
from ..runtime_parts import RuntimeParts
from .adoption import ICloneAdoption
from .spare import Spare, SpareWarmUp
from .template_build import TemplateBuilder
from .template_files import Template
from .template_key import TemplateKey
from .templates import TemplateStore, TemplateUnavailable

log = Logger()


def template_key(group: HostGroupConfig, ram_bytes: int, vcpus: int, image: Image, driver: IHypervisor) -> TemplateKey:
    """The key of the template a node of ``group`` with ``ram_bytes`` and ``vcpus`` is cloned from."""
    return TemplateKey(
        image=image.name,
        build=image.path.path,
        qemu=f"{driver.version}, {driver.description}",
        ram_bytes=ram_bytes,
        vcpus=vcpus,
        network=group.network is not None,
        storage_size=group.storage_size,
        aslr=group.guest_aslr,
        vsock=machine_vsock(group.agent_transport, driver),
        tunnel_ports=group.tunnel_ports,
    )


def spare_count(group: HostGroupConfig) -> int:
    """
    How many spare VMs of its templates ``group`` asks for (its nodes take
    them when it asks for any): ``warm_spare``, and none for a network other than a bridge.
    """
    return group.warm_spare if group.network is None or group.network.mode == "bridge" else 0


@frozen
class TemplateSupply:
    """
    :ivar parts: what nodes (and so templates and spares) are made with.
    :ivar catalog: the host groups' images.
    :ivar admission: the memory budget a spare must fit in.
    :ivar templates: the templates warm groups' nodes are cloned from;
        ``None`` for none (every node boots cold).
    :ivar adoption: gives each clone an identity of its own; ``None`` for
        none (a group with a network then has no templates).
    """

    parts: RuntimeParts
    catalog: Catalog
    admission: Admission
    templates: TemplateStore | None = None
    adoption: ICloneAdoption | None = None

    async def get(self, group: HostGroupConfig, ram_bytes: int, vcpus: int, image: Image) -> Template:
        """
        The template of ``group``'s nodes of ``ram_bytes`` and ``vcpus``, built when there is none.

        :raise TemplateUnavailable: there is none to be had.
        """
        driver = await self.parts.driver.get()
        key = template_key(group, ram_bytes, vcpus, image, driver)
        builder = TemplateBuilder(self.parts, image.rootfs.path, self.adoption)
        templates = self.templates
        if templates is None:
            raise TemplateUnavailable("no_templates", "this daemon keeps no templates")
        return await templates.get(key, image.kernel.path, image.initrd.path, builder)

    async def prepare(self, group: HostGroupConfig) -> None:
        """
        Build the template of ``group``'s nodes as the group makes them (its
        image, RAM and vCPUs) ahead of the first create, when the daemon
        starts; a failure is only logged (creates then boot cold).
        """
        if self.templates is None or (group.network is not None and self.adoption is None):
            return
        try:
            template = await self.get(group, group.ram_bytes, group.vcpu, self.catalog.image(group))
        except Exception as error:
            log.warn("no template for host group {group} yet: {error}", group=group.name, error=error)
            return
        self.replenish(group, template)

    def replenish(self, group: HostGroupConfig, template: Template) -> None:
        """
        Start a spare VM of ``template`` in the background when ``group`` (or
        another group of it before) asks for spares, the template's pool
        has fewer than that, none is being started and no clone of it is being
        made (:meth:`TemplateStore.add_spare`), and admission has room for one
        more VM of its RAM; once it is ready, the next one the same way.  A
        networked template has spares only for a bridged group (a spare's tap
        is renamed to the node's at the hand-over).
        """
        templates = self.templates
        # The clone that ends last may be of another group of the same template: it starts the spare then.
        if templates is None or not templates.wants_spare(template.key, spare_count(group)):
            return
        if not self.admission.room_for(template.key.ram_bytes):
            log.info("no spare VM for template {digest}: the memory budget has no room",
                     digest=template.key.digest())
            templates.short_of_room[template.key] = lambda: self.replenish(group, template)
            return
        spare = templates.add_spare(template)
        if spare is not None:
            Deferred.fromCoroutine(self._start_spare(group, spare))

    def room_freed(self) -> None:
        """
        Memory was given back (a node is gone): start the spares refused for
        lack of it, as far as it has room now (one still refused waits for the
        next).  Without this a pool stayed short until a clone of its template
        ended, though the group waits idle with memory to spare.
        """
        templates = self.templates
        if templates is not None and templates.short_of_room:
            retries = list(templates.short_of_room.values())
            templates.short_of_room.clear()
            for retry in retries:
                retry()

    async def _start_spare(self, group: HostGroupConfig, spare: Spare) -> None:
        """
        Start ``spare`` (warmed up where clones adopt identities); once it is
        ready, the pool's next one (a failed start is not tried again until a
        clone ends).
        """
        adoption = self.adoption
        warm_up = SpareWarmUp(self.parts.agents, adoption, self.parts.clock) if adoption is not None else None
        if await spare.start(await self.parts.driver.get(), self.parts.disks, warm_up):
            self.replenish(group, spare.template)


__all__ = ["TemplateSupply", "spare_count", "template_key"]
