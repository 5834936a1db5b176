# -*- test-case-name: tests.cli.test_output -*-
"""
What ``vmctl`` prints: tables, key/value listings and error lines.

Every function here is pure (data in, text out) so the look of the tool is
tested without a daemon, and the commands (:mod:`vmservice.cli.main`'s table) stay
a thin layer of calls and prints.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

from ..client import ApiError

__all__ = [
    "EXEC_HEADERS",
    "FS_HEADERS",
    "GROUP_HEADERS",
    "IMAGE_HEADERS",
    "NODE_HEADERS",
    "SECRET_HEADERS",
    "exec_rows",
    "exec_status",
    "format_entry",
    "format_error",
    "format_json",
    "format_node_event",
    "format_progress",
    "format_table",
    "format_time",
    "format_watch_event",
    "entry_rows",
    "group_rows",
    "image_rows",
    "listing",
    "human_size",
    "node_rows",
    "size_cell",
    "secret_rows",
]

#: Columns of ``vmctl list``.
NODE_HEADERS = ("HOSTNAME", "GROUP", "STATUS", "IP", "CPUS", "RAM", "CREATED", "TAGS")

#: Columns of ``vmctl fs ls``.
FS_HEADERS = ("MODE", "TYPE", "SIZE", "MODIFIED", "NAME")

#: Columns of ``vmctl groups``.
GROUP_HEADERS = ("NAME", "COUNT", "CPUS", "RAM", "GPUS", "ARCH")
IMAGE_HEADERS = ("NAME", "SIZE", "CREATED", "SOURCE", "RECIPE HASH")

#: Shown in a cell whose value is empty or missing, so columns stay aligned
#: for ``awk`` and the eye.
EMPTY = "-"

_UNITS = (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10))


def format_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """
    Align ``rows`` under ``headers`` in columns two spaces apart, without
    trailing blanks; one line per row, each ending in a newline.
    """
    table = [list(headers)] + [[cell if cell.strip() else EMPTY for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]
    return "\n".join(lines) + "\n"


def format_listing(
    answer: list[dict[str, Any]],
    as_json: bool,
    headers: Sequence[str],
    rows: Callable[[Iterable[dict[str, Any]]], list[list[str]]],
) -> str:
    """
    A listing as ``vmctl`` prints it: the JSON answer with ``--json``
    (:func:`format_json`), else a table of ``headers`` whose cells ``rows``
    makes (:func:`format_table`).
    """
    return format_json(answer) if as_json else format_table(headers, rows(answer))


def human_size(size: int) -> str:
    """
    A byte count the short binary way: ``512M``, ``2G``, ``1.5G``; exact
    when a unit divides it, else to one decimal; plain bytes under 1 KiB.
    """
    for suffix, unit in _UNITS:
        if size >= unit:
            if size % unit == 0:
                return f"{size // unit}{suffix}"
            return f"{size / unit:.1f}{suffix}"
    return str(size)


def format_time(text: str | None) -> str:
    """
    An RFC 3339 time as ``YYYY-MM-DD HH:MM:SS`` in UTC; text that does not
    parse is shown as it came, since the table must not fail on it.
    """
    if not text:
        return ""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return text
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%d %H:%M:%S")


def size_cell(value: object) -> str:
    """A size in bytes as a cell (``512M``); empty when the daemon sent none."""
    return human_size(value) if isinstance(value, int) else ""


def node_rows(nodes: Iterable[dict[str, Any]]) -> list[list[str]]:
    """The cells of ``vmctl list`` (see :data:`NODE_HEADERS`) for Node objects."""
    return [
        [
            str(node.get("hostname", "")),
            str(node.get("hostgroup", "")),
            str(node.get("status", "")),
            str(node.get("ip") or ""),
            str(node.get("cpus", "")),
            size_cell(node.get("ram_bytes")),
            format_time(node.get("created_at")),
            ",".join(node.get("tags") or ()),
        ]
        for node in nodes
    ]


#: The columns of ``vmctl stats`` and ``vmctl top``.
STATS_HEADERS = ("HOSTNAME", "STATUS", "CPUS", "LOAD1", "LOAD5", "MEM USED", "MEM TOTAL", "MEM%", "DISK USED",
                 "DISK%", "DISK R/W", "NET RX/TX", "UPTIME")


def _number(snapshot: dict[str, Any], name: str) -> float:
    value = snapshot.get(name)
    return float(value) if isinstance(value, (int, float)) else 0.0


def stats_rows(stats: Iterable[dict[str, Any]]) -> list[list[str]]:
    """
    The cells of ``vmctl stats`` (see :data:`STATS_HEADERS`) for NodeStat objects; a node without a
    snapshot shows its error after its status.
    """
    rows = []
    for stat in stats:
        snapshot = stat.get("snapshot")
        head = [str(stat.get("hostname", "")), str(stat.get("status", ""))]
        if not isinstance(snapshot, dict):
            rows.append(head + [str(stat.get("error") or "no snapshot")] + [""] * (len(STATS_HEADERS) - 3))
            continue
        s = snapshot
        rows.append(head + [
            str(s.get("totalCpus", "")),
            f"{_number(s, 'loadAvg1'):.2f}",
            f"{_number(s, 'loadAvg5'):.2f}",
            human_size(int(_number(s, "memoryUsed"))),
            human_size(int(_number(s, "totalMemory"))),
            f"{_number(s, 'memoryUsedPercent'):.1f}",
            human_size(int(_number(s, "diskSpaceUsed"))),
            f"{_number(s, 'diskSpaceUsedPercent'):.1f}",
            f"{human_size(int(_number(s, 'diskReadTotal')))}/{human_size(int(_number(s, 'diskWriteTotal')))}",
            f"{human_size(int(_number(s, 'networkReadTotal')))}/{human_size(int(_number(s, 'networkWriteTotal')))}",
            str(s.get("uptime", "")),
        ])
    return rows


def by_load(stats: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes by CPU load (1-minute load per CPU), busiest first; those without a snapshot last, by name."""
    def key(stat: dict[str, Any]) -> tuple[int, float, str]:
        snapshot = stat.get("snapshot")
        if not isinstance(snapshot, dict):
            return (1, 0.0, str(stat.get("hostname", "")))
        cpus = _number(snapshot, "totalCpus") or 1.0
        return (0, -_number(snapshot, "loadAvg1") / cpus, str(stat.get("hostname", "")))

    return sorted(stats, key=key)


#: The columns of ``vmctl secret list``.
SECRET_HEADERS = ("NAME", "SIZE", "MODE", "UID", "GID", "MODIFIED")


def secret_rows(secrets: Iterable[dict[str, Any]]) -> list[list[str]]:
    """The cells of ``vmctl secret list`` (see :data:`SECRET_HEADERS`) for Secret objects."""
    return [
        [
            str(secret.get("name", "")),
            str(secret.get("size", "")),
            str(secret.get("permissions", "")),
            str(secret.get("uid", "")),
            str(secret.get("gid", "")),
            format_time(secret.get("mod_time")),
        ]
        for secret in secrets
    ]


#: The columns of ``vmctl ps``.
EXEC_HEADERS = ("EXEC_ID", "PID", "STATUS", "STARTED", "OUTPUT", "COMMAND")


def exec_status(info: dict[str, Any]) -> str:
    """``running``, ``exit 3`` or ``SIGKILL`` for a background exec."""
    if info.get("running"):
        return "running"
    signal = info.get("signal")
    return str(signal) if signal else f"exit {info.get('exit_code')}"


def exec_rows(execs: Iterable[dict[str, Any]]) -> list[list[str]]:
    """The cells of ``vmctl ps`` (see :data:`EXEC_HEADERS`) for background execs."""
    return [
        [
            str(info.get("exec_id", "")),
            str(info.get("pid", "")),
            exec_status(info),
            format_time(info.get("started_at")),
            size_cell(info.get("bytes_written")),
            " ".join([str(info.get("command", ""))] + [str(a) for a in info.get("args") or ()]),
        ]
        for info in execs
    ]


def image_rows(images: Iterable[dict[str, Any]]) -> list[list[str]]:
    """The cells of ``vmctl image list`` (see :data:`IMAGE_HEADERS`) for ImageSummary objects."""
    return [
        [
            str(image.get("name", "")),
            size_cell(image.get("size")),
            format_time(image.get("created")),
            str(image.get("source", "")),
            str(image.get("recipe_hash") or ""),
        ]
        for image in images
    ]


def group_rows(groups: Iterable[dict[str, Any]]) -> list[list[str]]:
    """The cells of ``vmctl groups`` (see :data:`GROUP_HEADERS`) for HostGroup objects."""
    return [
        [
            str(group.get("name", "")),
            str(group.get("count", "")),
            str(group.get("cpus", "")),
            size_cell(group.get("ram_bytes")),
            str(group.get("gpu_count", "")),
            str(group.get("arch", "")),
        ]
        for group in groups
    ]


def listing(pairs: Sequence[tuple[str, str]]) -> str:
    """``key  value`` lines, the values aligned; an empty value shows as ``-``."""
    width = max(len(key) for key, _ in pairs)
    return "".join(f"{key.ljust(width)}  {value or EMPTY}\n" for key, value in pairs)


def format_error(error: ApiError) -> str:
    """The line for an error answer: ``vmctl: <message> (<status> <code>)``."""
    where = f"{error.status} {error.code}" if error.code else str(error.status)
    return f"vmctl: {error.message} ({where})"


def format_json(value: Any) -> str:
    """``value`` as indented JSON ending in a newline, for ``--json``."""
    return json.dumps(value, indent=2) + "\n"


def entry_rows(entries: Iterable[dict[str, Any]]) -> list[list[str]]:
    """
    The cells of ``vmctl fs ls`` (see :data:`FS_HEADERS`) for FsEntry
    objects: sizes in exact bytes (``ls -l`` style, so scripts can add them
    up) and times in UTC to the second.
    """
    return [
        [
            str(entry.get("mode", "")),
            str(entry.get("type", "")),
            str(entry.get("size", "")),
            format_time(entry.get("mtime")),
            str(entry.get("name", "")),
        ]
        for entry in entries
    ]


def format_entry(entry: dict[str, Any]) -> str:
    """An FsEntry as aligned ``key  value`` lines, for ``vmctl fs stat``."""
    return listing(list(zip(("mode", "type", "size", "modified", "name"), entry_rows([entry])[0])))


def format_progress(done: int, total: int | None, seconds: float) -> str:
    """
    A progress line: bytes so far (of ``total`` and the percentage when it is
    known) and the mean rate, in binary units: ``12.5M / 100M  12%  3.1M/s``.
    """
    rate = human_size(int(done / seconds)) + "/s" if seconds > 0 else "-"
    if total is None:
        return f"{human_size(done)}  {rate}"
    percent = 100 if total <= 0 else min(100, done * 100 // total)
    return f"{human_size(done)} / {human_size(total)}  {percent}%  {rate}"


def format_watch_event(event: dict[str, Any], as_json: bool = False) -> str:
    """
    One line for a watch event: ``<timestamp> <type> <path>`` (a directory's
    path ending in ``/``; an overflow's message instead of a path), or the
    event as compact JSON with ``as_json``.
    """
    if as_json:
        return json.dumps(event, separators=(",", ":")) + "\n"
    kind = str(event.get("type", ""))
    if kind == "overflow":
        what = str(event.get("message") or "events were lost")
    else:
        what = str(event.get("path", "")) + ("/" if event.get("isDir") and event.get("path") != "/" else "")
    return f"{event.get('timestamp', '')} {kind} {what}\n"


def format_node_event(event: dict[str, Any], as_json: bool = False) -> str:
    """
    One line for a lifecycle event: ``<id> <time> <type> <hostname> <status>``
    (``exit=N`` after a userdata's end; a gap says what was lost), or the
    event as compact JSON with ``as_json``.
    """
    if as_json:
        return json.dumps(event, separators=(",", ":")) + "\n"
    if event.get("type") == "gap":
        return (f"{event.get('id', '')} gap: events after {event.get('last_event_id')} are no longer held; "
                f"resuming at {event.get('oldest_id')}\n")
    line = f"{event.get('id', '')} {event.get('time', '')} {event.get('type', '')} {event.get('hostname', '')} " \
           f"{event.get('status', '')}"
    if event.get("exit_code") is not None:
        line += f" exit={event['exit_code']}"
    return line + "\n"
