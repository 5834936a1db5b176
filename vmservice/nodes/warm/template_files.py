# -*- test-case-name: tests.nodes.warm.test_templates,tests.nodes.warm.test_spare,tests.nodes.warm.test_cloning -*-
"""
One template's files: :class:`Template`, the record every part of a warm
start passes around (the store that builds and collects templates,
:mod:`.templates`; their builder, :mod:`.template_build`; the clones' disks,
:mod:`.clone_disk`; the spares, :mod:`.spare`; cloning and the node's
runtime), kept apart from all of them so that each imports it from below.
"""

from __future__ import annotations

import os

from attrs import frozen

from ..paths import daemon_tag
from .template_key import TemplateKey


def ram_directory(state_dir: str, tmpfs_dir: str) -> str:
    """The directory of this daemon's templates' RAM files (in a tmpfs others may share)."""
    return os.path.join(tmpfs_dir, f"vmservice-{daemon_tag(state_dir)}")


@frozen
class Template:
    """One template's files.

    :ivar key: what it was built for.
    :ivar directory: its directory under the state directory.
    :ivar disk: its frozen disk.
    :ivar device_state: its saved device state.
    :ivar ram_file: its memory, in the tmpfs.
    :ivar kernel: the kernel it booted (its clones run the same).
    :ivar initrd: the initramfs it booted.
    """

    key: TemplateKey
    directory: str
    disk: str
    device_state: str
    ram_file: str
    kernel: str
    initrd: str

    @property
    def vsock(self) -> bool:
        """Whether its VM has a vhost-vsock device (its clones have one too)."""
        return self.key.vsock

    @property
    def tunnel_ports(self) -> int:
        """How many tunnel ports its VM has (its clones have as many)."""
        return self.key.tunnel_ports

    @property
    def empty_overlay(self) -> str:
        """An empty overlay over its frozen disk, which every clone's disk is a copy of (:mod:`.clone_disk`)."""
        return os.path.join(self.directory, "empty.qcow2")

    def missing(self) -> str | None:
        """What is gone of it (deleted under the daemon), or ``None`` when it is whole."""
        for path in (self.disk, self.device_state, self.ram_file):
            if not os.path.exists(path):
                return f"{path} is missing"
        return None


__all__ = ["Template", "ram_directory"]
