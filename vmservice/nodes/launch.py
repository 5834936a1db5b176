# -*- test-case-name: tests.nodes.test_launch,tests.nodes.test_fleet,tests.nodes.warm.test_forking -*-
"""
How a node's VM starts: a :data:`Launch`, which each maker of a VM builds
and :meth:`.runtime.NodeRuntime.spawn` starts.

- :class:`Cold`: a boot of the image's kernel (a create, a relaunch): the
  only start timed for the boot metric;
- :class:`Restore`: the node's own snapshot, read at once (a restore, a wake);
- :class:`Clone`: a clone of a template: its RAM file mapped privately, the
  VM waiting in ``-incoming defer`` for the template's device state
  (:meth:`IMachine.load_device_state`);
- :class:`ForkChild`: a fork's child: waiting in ``-incoming defer`` for the
  state its parent saved (loaded by :class:`.warm.memory_fork.MemoryFork`), its
  memory the parent's frozen copy when the parent had a memory file.
"""

from __future__ import annotations

from typing import Protocol, Union

from attrs import evolve, frozen

from ..hypervisors.base import MachineSpec, RamBacking


class ClonedFrom(Protocol):
    """What a clone starts from of its template (:class:`.warm.template_files.Template`)."""

    @property
    def kernel(self) -> str:
        """The kernel the template booted."""

    @property
    def initrd(self) -> str:
        """The initramfs it booted."""

    @property
    def ram_file(self) -> str:
        """Its RAM file, which the clone maps privately."""

    @property
    def vsock(self) -> bool:
        """Whether its VM has a vhost-vsock device, which the clone then has too."""

    @property
    def tunnel_ports(self) -> int:
        """How many tunnel ports its VM has, which the clone then has too."""


@frozen
class Cold:
    """
    A boot.

    :ivar kernel: the kernel it boots.
    :ivar initrd: the initramfs it boots.
    """

    kernel: str
    initrd: str


@frozen
class Restore:
    """
    A start from the node's own snapshot.

    :ivar kernel: the kernel the snapshot's VM booted (a clone's: its template's).
    :ivar initrd: the initramfs it booted.
    :ivar state: the snapshot, read at once.
    """

    kernel: str
    initrd: str
    state: str


@frozen
class Clone:
    """
    A start as a clone of ``template``, which it boots nothing of its own:
    the kernel and initramfs are the template's.
    """

    template: ClonedFrom

    @property
    def kernel(self) -> str:
        """The template's kernel."""
        return self.template.kernel

    @property
    def initrd(self) -> str:
        """The template's initramfs."""
        return self.template.initrd


@frozen
class ForkChild:
    """
    A fork's child.

    :ivar kernel: the kernel its parent booted.
    :ivar initrd: the initramfs its parent booted.
    :ivar state: the state its parent saved, loaded once the VM waits for it.
    :ivar memory: its memory backend (the parent's frozen copy mapped
        privately), or ``None`` for its record's.
    """

    kernel: str
    initrd: str
    state: str
    memory: RamBacking | None = None


#: How a node's VM starts.
Launch = Union[Cold, Restore, Clone, ForkChild]


def incoming(launch: Launch) -> str | None:
    """The saved state ``launch`` starts from (what the spec's devices follow), or ``None`` for none."""
    if isinstance(launch, (Restore, ForkChild)):
        return launch.state
    return None


def shaped(launch: Launch, spec: MachineSpec) -> MachineSpec:
    """``spec``, made for :func:`incoming`, as ``launch`` starts it."""
    if isinstance(launch, Clone):
        return evolve(spec, memory=RamBacking(launch.template.ram_file, shared=False), defer_incoming=True)
    if isinstance(launch, ForkChild):
        spec = evolve(spec, incoming=None, defer_incoming=True)
        if launch.memory is not None:
            spec = evolve(spec, memory=launch.memory)
    return spec


def timed(launch: Launch) -> bool:
    """Whether ``launch`` is a boot, whose time until the agent answers is the boot metric's."""
    return isinstance(launch, Cold)


__all__ = ["Clone", "ClonedFrom", "Cold", "ForkChild", "Launch", "Restore", "incoming", "shaped", "timed"]
