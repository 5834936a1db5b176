# -*- test-case-name: tests.nodes.warm.test_forking -*-
"""
The files of forks beyond one fork's run: the fork directories of frozen
disks (``<state_dir>/forks/``), deleted once no record names their disk, and
the state files an earlier version left in the shared tmpfs.
"""

from __future__ import annotations

import os
import shutil

from twisted.logger import Logger

from ..paths import daemon_tag, discard

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
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        path = os.path.join(directory, name)
        if path not in live:
            log.info("removing unused fork files {path}", path=path)
            shutil.rmtree(path, ignore_errors=True)


def file_size(path: str) -> int:
    """The size of the file at ``path``, 0 when there is none."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


__all__ = ["collect_forks", "discard_fork_states", "file_size", "forks_directory", "state_prefix"]
