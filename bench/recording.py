# -*- test-case-name: tests.test_published_figures -*-
"""
What every benchmark records beside its timings: a process's memory and CPU
time (the daemon's peak memory above all), and the result file under
``bench/results/``.

A results file is written by its benchmark alone, through
:func:`write_result`, and says where its figures come from (the ``run``
key): the commit and whether the tree differed from it, when the
measurement began and ended (UTC), the load average before and after it
(``/proc/loadavg``), the command, and the machine (CPUs, memory, kernel,
QEMU, ``/dev/kvm``).  A benchmark calls :func:`begin` before it measures
and :func:`write_result` as soon as it has finished::

    run = begin()
    ...  # measure
    write_result(path, result, run)

:func:`begin` also makes the daemons and QEMU helpers the benchmark starts
import this checkout's ``vmservice`` (``PYTHONPATH``), whatever checkout the
virtualenv's editable install points at, so that the commit recorded is the
code measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

#: The checkout the benchmarks belong to (the parent of ``bench/``).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Where results files live; changes there do not make the tree "dirty".
RESULTS = os.path.join(ROOT, "bench", "results")


def status_kib(pid: int, field: str) -> int:
    """A KiB figure of process ``pid``'s ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``...)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss(pid: int) -> int | None:
    """The peak resident set size of process ``pid`` in bytes (VmHWM), if readable."""
    try:
        return status_kib(pid, "VmHWM") * 1024
    except (OSError, RuntimeError):
        return None


def load_average(path: str = "/proc/loadavg") -> list[float]:
    """The 1, 5 and 15 minute load averages, as ``/proc/loadavg`` gives them."""
    with open(path) as f:
        return [float(word) for word in f.read().split()[:3]]


def utc_now() -> str:
    """The time now, UTC, to the second (``2026-11-28T20:35:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Run:
    """
    A measurement under way: when it began and the load average then.

    :ivar started_at: UTC time :func:`begin` was called.
    :ivar load_average_before: ``/proc/loadavg``'s three figures then.
    :ivar argv: the benchmark's command line.
    """

    started_at: str
    load_average_before: list[float]
    argv: list[str]


def begin() -> Run:
    """
    Note the start of a measurement (call it before the first thing measured),
    and have the processes the benchmark starts import this checkout's code.
    """
    paths = [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != ROOT]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    return Run(started_at=utc_now(), load_average_before=load_average(),
               argv=[os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:])


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True, text=True).stdout


def commit() -> dict[str, Any]:
    """
    The checkout's commit (``git rev-parse HEAD``), whether its tree differs
    from it (``dirty``; results files aside) and the paths that do.
    """
    try:
        head = _git("rev-parse", "HEAD").strip()
        status = _git("status", "--porcelain", "--", ".", ":(exclude)bench/results")
    except (OSError, subprocess.CalledProcessError) as error:
        return {"commit": None, "dirty": None, "error": str(error)}
    changed = sorted(line[3:] for line in status.splitlines() if line.strip())
    return {"commit": head, "dirty": bool(changed), "changed": changed}


def _first_field(path: str, name: str) -> str | None:
    """The value of the first ``name: value`` line of ``path`` (``/proc/cpuinfo``, ``/proc/meminfo``)."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def qemu_version() -> str | None:
    """The first line of ``qemu-system-x86_64 --version``, or ``None`` when it cannot be run."""
    try:
        out = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def machine() -> dict[str, Any]:
    """What the figures depend on besides the code: CPUs, memory, kernel, QEMU, KVM."""
    mem_total = _first_field("/proc/meminfo", "MemTotal")
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _first_field("/proc/cpuinfo", "model name"),
        "mem_total_kib": int(mem_total.split()[0]) if mem_total else None,
        "kernel": os.uname().release,
        "qemu": qemu_version(),
        "dev_kvm": os.path.exists("/dev/kvm"),
    }


def provenance(run: Run) -> dict[str, Any]:
    """The ``run`` entry of a results file: ``run``'s start, the load now, the commit and the machine."""
    return {
        "script": run.argv[0],
        "argv": run.argv,
        **commit(),
        "started_at": run.started_at,
        "finished_at": utc_now(),
        "load_average_before": run.load_average_before,
        "load_average_after": load_average(),
        "machine": machine(),
    }


def write_result(path: str, result: dict[str, Any], run: Run,
                 describe: Callable[[Run], dict[str, Any]] = provenance) -> None:
    """
    Write ``result`` with its provenance as indented JSON to ``path``, its
    directory made when missing: the only way a benchmark writes its results
    file.  Call it as soon as the measurement has ended: the load average
    after is read now.

    :param run: what :func:`begin` returned before the measurement.
    :param describe: makes the ``run`` entry from ``run`` (:func:`provenance`,
        which asks git and QEMU; tests give their own).
    """
    if "run" in result:
        raise ValueError("a result's 'run' key is the recording's own")
    record = {"run": describe(run), **result}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
