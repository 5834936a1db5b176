# -*- test-case-name: tests.nodes.test_store -*-
"""
Node records on disk: one JSON file per node, written atomically, and the
per-group hostname counters.

Layout under ``state_dir``::

    nodes/<hostname>/node.json     the NodeRecord
    nodes/<hostname>/disk.qcow2    its root disk (and console.log, sockets, ...)
    nodes/<hostname>/state.bin     its snapshot while it is suspended
    counters/<group>               the last hostname number handed out
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from datetime import datetime

import cattrs

from twisted.logger import Logger

from ..durable import remove_temporaries, write_atomic
from .model import NodeRecord, Status

log = Logger()

_converter = cattrs.Converter()
_converter.register_unstructure_hook(datetime, lambda value: value.isoformat())
_converter.register_structure_hook(datetime, lambda value, _: datetime.fromisoformat(value))


class StateDirectoryInUse(Exception):
    """Another daemon runs on this state directory; the message says which pid."""


class NodeStore:
    """
    The persisted state of one daemon.

    :param state_dir: the daemon's state directory; created when missing.
    """

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self._nodes = os.path.join(state_dir, "nodes")
        self._lock_fd: int | None = None
        self._counters = os.path.join(state_dir, "counters")
        os.makedirs(self._nodes, mode=0o700, exist_ok=True)
        os.makedirs(self._counters, mode=0o700, exist_ok=True)
        remove_temporaries(self._counters)

    @property
    def nodes_dir(self) -> str:
        """The directory that holds every node's directory."""
        return self._nodes

    def node_dir(self, hostname: str) -> str:
        """The directory that holds everything of node ``hostname``."""
        return os.path.join(self._nodes, hostname)

    def save(self, record: NodeRecord) -> None:
        """Write ``record`` atomically, creating its directory."""
        directory = self.node_dir(record.hostname)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        data = json.dumps(_converter.unstructure(record), indent=2, sort_keys=True)
        write_atomic(os.path.join(directory, "node.json"), data.encode() + b"\n")

    def remove(self, hostname: str) -> None:
        """Remove the node's record and everything in its directory."""
        # The record goes first: a crash after this leaves only files
        # that the next start recognises as strays and removes.
        self.remove_record(hostname)
        shutil.rmtree(self.node_dir(hostname), ignore_errors=True)

    def remove_record(self, hostname: str) -> None:
        """
        Remove the node's record alone (it may be missing): its other files
        are then strays that the next start removes.  Needs no room on the
        disk, unlike writing the record.
        """
        try:
            os.unlink(os.path.join(self.node_dir(hostname), "node.json"))
        except FileNotFoundError:
            pass

    def load_all(self) -> tuple[list[NodeRecord], list[str]]:
        """
        Read every record; temporary files of writes a crash cut short are
        removed from the node directories.

        A directory whose record exists but cannot be read (damaged, or
        written by another version) is set aside as ``.broken-<name>``, with
        its disk, for a person to look at: it is never deleted.

        :return: the records, and the names of node directories that hold no
            record at all (strays of a crash, for the caller to remove).
        """
        records: list[NodeRecord] = []
        strays: list[str] = []
        for name in sorted(os.listdir(self._nodes)):
            if name.startswith("."):
                continue
            remove_temporaries(os.path.join(self._nodes, name))
            path = os.path.join(self._nodes, name, "node.json")
            if not os.path.exists(path):
                strays.append(name)
                continue
            try:
                with open(path, "rb") as f:
                    records.append(_converter.structure(json.load(f), NodeRecord))
            except (OSError, ValueError, cattrs.BaseValidationError) as error:
                aside = os.path.join(self._nodes, f".broken-{name}-{int(time.time())}")
                log.error("node {name}: unreadable record ({error}); moved to {aside}", name=name, error=error, aside=aside)
                os.replace(os.path.join(self._nodes, name), aside)
        return records, strays

    def lock(self) -> None:
        """
        Take the state directory for this process (``daemon.lock``, flock'ed
        while the process lives): two daemons on one state directory would
        kill each other's VMs as orphans.

        :raise StateDirectoryInUse: another process holds it.
        """
        path = os.path.join(self.state_dir, "daemon.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateDirectoryInUse(
                f"state directory {os.path.abspath(self.state_dir)} is in use by another vmservice daemon (pid {holder})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def next_index(self, group: str) -> int:
        """
        Hand out the next hostname number of ``group`` (1, 2, ...); numbers
        are never handed out twice, even across restarts.
        """
        path = os.path.join(self._counters, group)
        try:
            with open(path) as f:
                last = int(f.read().strip() or "0")
        except (OSError, ValueError):
            last = 0
        index = last + 1
        write_atomic(path, f"{index}\n".encode())
        return index


__all__ = ["NodeStore", "StateDirectoryInUse", "Status"]
