# -*- test-case-name: tests.devcluster.test_state -*-
"""
``state.json``: what a started control plane is, so that ``stop`` and ``status`` find it again.

Each process is recorded with its pid and its start time (``/proc/PID/stat``'s 22nd field, in clock
ticks since boot): a pid whose start time differs is another process that got the number since, and is
never signalled.
"""

from __future__ import annotations

import json
import os
from typing import Any

from attrs import asdict, frozen

from vmservice.devcluster.ports import Ports
from vmservice.durable import write_atomic

__all__ = ["STATE_FILE", "ClusterState", "Process", "is_running", "load_state", "process_start_time", "save_state"]

STATE_FILE = "state.json"

#: The most a state file may hold (it is a few hundred bytes).
MAX_STATE_BYTES = 1 << 20


@frozen
class Process:
    """A started component: its name, pid and start time."""

    name: str
    pid: int
    start_time: int


@frozen
class ClusterState:
    """
    A started control plane.

    :ivar directory: its directory.
    :ivar bin_dir: the cache entry's ``bin/`` it runs from.
    :ivar api_url: the API server's URL.
    :ivar ports: its ports.
    :ivar processes: its processes, in the order they were started.
    """

    directory: str
    bin_dir: str
    api_url: str
    ports: Ports
    processes: tuple[Process, ...]

    def to_json(self) -> bytes:
        """The state file's content."""
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> ClusterState:
        """
        Read :meth:`to_json`'s output.

        :raise ValueError: not a state file.
        """
        try:
            record: Any = json.loads(data)
            processes = tuple(Process(str(each["name"]), _integer(each["pid"]), _integer(each["start_time"]))
                              for each in record["processes"])
            return cls(str(record["directory"]), str(record["bin_dir"]), str(record["api_url"]),
                       Ports(**{name: _integer(value) for name, value in record["ports"].items()}), processes)
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"not a control plane state file: {error!r}") from None


def _integer(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise TypeError(f"{value!r} is no positive integer")
    return value


def save_state(directory: str, state: ClusterState) -> None:
    """Write ``state`` to ``directory``'s state file (0600, whole or not at all)."""
    write_atomic(os.path.join(directory, STATE_FILE), state.to_json())


def load_state(directory: str) -> ClusterState | None:
    """
    The state file of ``directory``; ``None`` if there is none.

    :raise ValueError: it is not a state file.
    """
    try:
        fd = os.open(os.path.join(directory, STATE_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        return ClusterState.from_json(f.read(MAX_STATE_BYTES))


def process_start_time(pid: int, proc: str = "/proc") -> int | None:
    """The start time of the running process ``pid``; ``None`` if there is none (a zombie is none)."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as f:
            stat = f.read(4096)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    # The command name (field 2) is in parentheses and may hold anything: fields count from the last ')'.
    fields = stat[stat.rfind(b")") + 2:].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def is_running(process: Process, proc: str = "/proc") -> bool:
    """Whether ``process`` still runs (its pid names a process started when it was)."""
    return process_start_time(process.pid, proc) == process.start_time
