# -*- test-case-name: tests.nodes.warm.test_forking -*-
"""
The files of forks: the parent's disk frozen under a fork directory
(``<state_dir>/forks/``, :func:`switch_disk`), the fork directories deleted
once no record names their disk, and the state files an earlier version left
in the shared tmpfs.
"""

from __future__ import annotations

import os
import secrets
import shutil

from twisted.logger import Logger

from ...hypervisors.base import IMachine
from ...storage.interfaces import IDisks
from ..operation import drive
from ..paths import daemon_tag, discard, listing
from ..runtime import NodeRuntime

log = Logger()


def forks_directory(state_dir: str) -> str:
    """Where the frozen disks of forks live."""
    return os.path.join(state_dir, "forks")



def state_prefix(state_dir: str, tmpfs_dir: str) -> str:
    """
    How the names of this daemon's fork state files began in earlier versions
    (in ``tmpfs_dir`` itself, which others share; now they are in its memory
    directory: :func:`.fork_memory.fork_state`).
    """
    return os.path.join(tmpfs_dir, f"vmservice-fork-{daemon_tag(state_dir)}-")


def discard_fork_states(state_dir: str, tmpfs_dir: str) -> None:
    """
    Delete the state files of forks an earlier version of this daemon left in
    ``tmpfs_dir`` (it ended during a fork; those of this version go with the
    memory directory's sweep).
    """
    prefix = state_prefix(state_dir, tmpfs_dir)
    try:
        names = os.listdir(tmpfs_dir)
    except OSError:
        return
    for name in names:
        path = os.path.join(tmpfs_dir, name)
        if path.startswith(prefix):
            discard(path)


def collect_forks(state_dir: str, referenced: set[str]) -> None:
    """Delete the fork directories whose frozen disk no record in ``referenced`` names."""
    directory = forks_directory(state_dir)
    live = {os.path.dirname(path) for path in referenced}
    for name in listing(directory):
        path = os.path.join(directory, name)
        if path not in live:
            log.info("removing unused fork files {path}", path=path)
            shutil.rmtree(path, ignore_errors=True)


async def switch_disk(parent: NodeRuntime, machine: IMachine, frozen_disk: str, disks: IDisks, group_size: int) -> None:
    """
    Give the parent's disk a second name, ``frozen_disk``, and switch its
    VM to a new overlay over it, which then takes the disk's usual name.

    QEMU reopens the frozen disk read-only *by the name it opened it
    with* when it switches, so that name must still be the frozen disk
    then: the overlay is made under a name of its own
    (``disk.<random>.qcow2``, kept as a second name of the parent's disk
    for the next fork) and renamed over ``disk.qcow2`` only afterwards.
    The overlay has the frozen disk's size (``group_size`` when ``disks``
    cannot tell).
    """
    disk = parent.paths.disk
    directory = os.path.dirname(disk)
    earlier = [os.path.join(directory, name) for name in os.listdir(directory)
               if name.startswith("disk.") and name.endswith(".qcow2") and name != "disk.qcow2"]
    overlay = os.path.join(directory, f"disk.{secrets.token_hex(4)}.qcow2")
    os.makedirs(os.path.dirname(frozen_disk), mode=0o700, exist_ok=True)
    os.link(disk, frozen_disk)
    try:
        info = disks.info(frozen_disk)
        size = info.size_bytes if info is not None else group_size
        await disks.create(frozen_disk, overlay, size)
        await drive("fork", parent.hostname, machine.snapshot_disk(overlay), machine)
    except BaseException:
        discard(overlay)
        discard(frozen_disk)
        raise
    os.link(overlay, disk + ".new")
    os.replace(disk + ".new", disk)
    for path in earlier:
        discard(path)


def file_size(path: str) -> int:
    """The size of the file at ``path``, 0 when there is none."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


__all__ = ["collect_forks", "discard_fork_states", "file_size", "forks_directory", "state_prefix", "switch_disk"]
