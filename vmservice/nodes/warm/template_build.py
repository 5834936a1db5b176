# -*- test-case-name: tests.nodes.warm.test_templates -*-
"""
Building one template: boot the image with its memory in the template's RAM
file (mapped shared), wait for the agent, warm up the agent's lazily loaded
handlers (one exec, a file-system call and a small copy, so a clone's first
ones are fast), then save the device state without stopping the guest
(``x-ignore-shared``: the memory is the file) and kill it.  Its disk is
then frozen: never written again, the backing file of every clone's disk.
"""

from __future__ import annotations

import errno
import os

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from zope.interface import implementer

from ...errors import AgentError
from ...guestport.exec import ExecRequest, IExecSink
from ...guestport.files import UploadRequest
from ...guestport.guest import IGuestConnection
from ...hypervisors.base import IMachine, MachineSpec, RamBacking
from ...wire.tunnelport import socket_name
from ..readiness import answered, first_of, wait_for_guest
from ..runtime_parts import RuntimeParts
from .adoption import ICloneAdoption
from .clone_disk import make_empty_overlay
from .template_files import Template

log = Logger()

#: Seconds a template's guest has to boot and answer.
BOOT_TIMEOUT = 120.0
#: The MAC of a template's network interface (locally administered; each clone adopts its own).
TEMPLATE_MAC = "02:00:00:00:00:01"
#: Where the warm-up copy goes in the template's guest (removed at once).
WARM_FILE = "/tmp/.vmservice-warm"


class WarmUpFailed(Exception):
    """The template's guest did not run its warm-up; the message says why."""


@implementer(IExecSink)
class _ExitSink:
    """Waits for an exec's end; its output is dropped."""

    def __init__(self) -> None:
        self.done: Deferred[int] = Deferred()

    def started(self, pid: int) -> None:
        pass

    def output(self, name: str, data: bytes) -> None:
        pass

    def exited(self, exit_code: int, signal: str | None) -> None:
        self.done.callback(exit_code)

    def failed(self, message: str, exit_code: int) -> None:
        self.done.errback(WarmUpFailed(f"the warm-up exec failed: {message}"))

    def lost(self, error: AgentError) -> None:
        self.done.errback(error)


async def warm_up(agent: IGuestConnection) -> None:
    """Run one exec, a file-system call and a small copy in the guest, so their handlers are loaded."""
    sink = _ExitSink()
    agent.exec(ExecRequest(cmd="true"), sink)
    code = await sink.done
    if code != 0:
        raise WarmUpFailed(f"the warm-up exec exited {code}")
    await agent.stat("/")
    upload = agent.upload(UploadRequest(path=WARM_FILE))
    upload.write(b"warm\n")
    upload.end()
    await upload.result
    await agent.remove(WARM_FILE, False)


@frozen
class TemplateBuilder:
    """
    Builds templates with the node layer's driver, disks and agent connections.

    :ivar parts: what nodes are made with (driver, disks, agent connections, clock).
    :ivar rootfs: the image's root file system, the template's disk's base.
    :ivar adoption: what the template's guest loads ahead for its clones'
        adoption; ``None`` for none.
    :ivar timeout: seconds the template's guest has to answer.
    """

    parts: RuntimeParts
    rootfs: str
    adoption: ICloneAdoption | None = None
    timeout: float = BOOT_TIMEOUT

    def spec(self, template: Template) -> MachineSpec:
        """The template's VM: a node's, its memory in the RAM file mapped shared."""
        directory = template.directory
        key = template.key
        return MachineSpec(
            name=f"template-{key.digest()[:8]}",
            vcpus=key.vcpus,
            ram_bytes=key.ram_bytes,
            kernel=template.kernel,
            initrd=template.initrd,
            disk=template.disk,
            agent_socket=os.path.join(directory, "agent.sock"),
            qmp_socket=os.path.join(directory, "qmp.sock"),
            console_log=os.path.join(directory, "console.log"),
            metrics_socket=os.path.join(directory, "stats.sock"),
            bulk_socket=os.path.join(directory, "bulk.sock"),
            tunnel_sockets=tuple(os.path.join(directory, socket_name(index)) for index in range(key.tunnel_ports)),
            memory=RamBacking(template.ram_file, shared=True),
            loose_nic=TEMPLATE_MAC if key.network else None,
            aslr=key.aslr,
            vsock=key.vsock,
        )

    async def __call__(self, template: Template) -> None:
        """Build ``template``; the VM and its connection are gone when this ends, whatever happened."""
        parts = self.parts
        await parts.disks.create(self.rootfs, template.disk, template.key.storage_size)
        driver = await parts.driver.get()
        machine = await driver.start(self.spec(template), os.path.join(template.directory, "qemu.log"))
        agent = parts.agents(os.path.join(template.directory, "agent.sock"), "auto" if template.key.vsock else "virtio-serial")
        # A template VM stopped for lack of room for its disk's writes fails the build at once.
        stalled: Deferred[None] = Deferred()
        machine.on_no_room(lambda: None if stalled.called else stalled.errback(
            OSError(errno.ENOSPC, f"the template's disk: {os.strerror(errno.ENOSPC)}")))
        try:
            agent.start()
            warm = Deferred.fromCoroutine(first_of(Deferred.fromCoroutine(self._warm(agent)), stalled))
            await wait_for_guest(parts.clock, machine, warm, self.timeout)
            await machine.save_device_state(template.device_state)
        finally:
            await agent.stop()
            await _kill(machine)
        for name in ("agent.sock", "qmp.sock", "stats.sock"):
            try:
                os.unlink(os.path.join(template.directory, name))
            except FileNotFoundError:
                pass
        # Every clone's disk is a copy of this one (see .clone_disk).
        await make_empty_overlay(parts.disks, template.disk, template.empty_overlay, template.key.storage_size)

    async def _warm(self, agent: IGuestConnection) -> None:
        await answered(agent)
        await warm_up(agent)
        if self.adoption is not None:
            await self.adoption.prepare(agent)


async def _kill(machine: IMachine) -> None:
    await machine.kill()


__all__ = ["BOOT_TIMEOUT", "TemplateBuilder", "WarmUpFailed", "warm_up"]
