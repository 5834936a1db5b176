# -*- test-case-name: tests.cli.test_output -*-
"""
Tests for :mod:`vmservice.cli.output`: what ``vmctl`` prints, as pure
functions of the API's JSON.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.cli.output import (
    format_node_event,
    format_watch_event,
    GROUP_HEADERS,
    NODE_HEADERS,
    format_error,
    format_json,
    format_table,
    format_time,
    group_rows,
    human_size,
    image_rows,
    IMAGE_HEADERS,
    node_rows,
)
from vmservice.cli.listings import format_description, format_health, format_info
from vmservice.client import ApiError
from vmservice.config import parse_size

NODE = {
    "hostname": "demo-1", "hostgroup": "demo", "ip": "", "ram_bytes": 512 * 1024 * 1024, "cpus": 2,
    "created_at": "2026-11-22T10:59:26.5Z", "tags": ["a", "b"], "arch": "x86_64", "status": "Running",
    "persistent": False,
}


class TableTests(SynchronousTestCase):
    def test_alignment(self) -> None:
        """Columns are left-aligned two spaces apart, with no trailing blanks; empty cells show ``-``."""
        text = format_table(("A", "LONGER"), [["xyz", ""], ["w", "v"]])
        self.assertEqual(text, "A    LONGER\nxyz  -\nw    v\n")

    def test_header_only(self) -> None:
        """With no rows the header alone is printed."""
        self.assertEqual(format_table(("NAME", "X"), []), "NAME  X\n")

    @given(st.lists(st.lists(st.text(alphabet="abcxyz-.", max_size=8), min_size=3, max_size=3), max_size=6))
    def test_columns_line_up(self, rows: list[list[str]]) -> None:
        """Every cell of a column starts at the same offset on every line."""
        lines = format_table(("H1", "H2", "H3"), rows).splitlines()
        self.assertEqual(len(lines), len(rows) + 1)
        start = lines[0].index("H3")
        for line, row in zip(lines[1:], rows):
            self.assertEqual(line[start:], row[2] or "-")

    def test_node_rows(self) -> None:
        """A Node becomes HOSTNAME GROUP STATUS IP CPUS RAM CREATED TAGS cells."""
        self.assertEqual(len(NODE_HEADERS), 8)
        self.assertEqual(
            node_rows([NODE]),
            [["demo-1", "demo", "Running", "", "2", "512M", "2026-11-22 10:59:26", "a,b"]],
        )
        self.assertIn("demo-1    demo   Running  -   2     512M", format_table(NODE_HEADERS, node_rows([NODE])))

    def test_group_rows(self) -> None:
        """A HostGroup becomes NAME COUNT CPUS RAM GPUS ARCH cells."""
        group = {"name": "demo", "count": 0, "ram_bytes": 1 << 30, "cpus": 2, "gpu_count": 0, "arch": "x86_64"}
        self.assertEqual(len(GROUP_HEADERS), 6)
        self.assertEqual(group_rows([group]), [["demo", "0", "2", "1G", "0", "x86_64"]])

    def test_image_rows(self) -> None:
        """An ImageSummary becomes NAME SIZE CREATED SOURCE HASH cells; a missing hash is empty."""
        images = [{"name": "dev", "size": 640 << 20, "created": "2026-11-25T20:08:01Z", "source": "recipe:dev",
                   "recipe_hash": "d3ea735e5dfb84af", "ssh_server": True},
                  {"name": "app", "size": 1 << 30, "created": "2026-11-25T20:09:00Z", "source": "oci:app:1"}]
        self.assertEqual(len(IMAGE_HEADERS), 5)
        self.assertEqual(image_rows(images), [["dev", "640M", "2026-11-25 20:08:01", "recipe:dev", "d3ea735e5dfb84af"],
                                              ["app", "1G", "2026-11-25 20:09:00", "oci:app:1", ""]])


class ValueTests(SynchronousTestCase):
    def test_human_size(self) -> None:
        """Sizes use the largest binary unit: exact when it divides, else one decimal."""
        self.assertEqual(
            [human_size(n) for n in (0, 1023, 1024, 512 << 20, 3 << 29, 5 << 40, 1536)],
            ["0", "1023", "1K", "512M", "1.5G", "5T", "1.5K"],
        )

    @given(st.integers(0, 1023), st.sampled_from([1, 1 << 10, 1 << 20, 1 << 30, 1 << 40]))
    def test_exact_sizes_read_back(self, count: int, unit: int) -> None:
        """A size that is a whole number of its unit is printed exactly: ``--ram`` reads back the same bytes."""
        size = count * unit
        self.assertEqual(parse_size(human_size(size)), size)

    def test_format_time(self) -> None:
        """RFC 3339 times become UTC ``YYYY-MM-DD HH:MM:SS``; other text is kept; nothing stays empty."""
        self.assertEqual(format_time("2026-11-22T10:59:26Z"), "2026-11-22 10:59:26")
        self.assertEqual(format_time("2026-11-22T12:59:26+02:00"), "2026-11-22 10:59:26")
        self.assertEqual(format_time("yesterday"), "yesterday")
        self.assertEqual(format_time(None), "")

    def test_info(self) -> None:
        """Info prints every field as aligned ``key  value`` lines."""
        self.assertEqual(
            format_info({"version": "0.1.0", "git_commit": "abc", "arch": "amd64"}),
            "version     0.1.0\ngit_commit  abc\narch        amd64\n",
        )
        self.assertEqual(format_info({}), "")

    def test_health(self) -> None:
        """Health shows a headline and the uptimes as whole-second durations."""
        text = format_health({
            "hostname": "demo-1", "agent_uptime": 65_400_000_000, "agent_version": "0.1.0",
            "system_uptime": 3_723_000_000_000, "userdata_ran": False, "ip": "",
        })
        self.assertEqual(
            text,
            "demo-1: healthy\n"
            "  agent version  0.1.0\n"
            "  agent uptime   1m5s\n"
            "  system uptime  1h2m3s\n"
            "  userdata ran   no\n"
            "  ip             -\n",
        )

    def test_error(self) -> None:
        """Errors read ``vmctl: <message> (<status> <code>)``, without a code when there is none."""
        self.assertEqual(format_error(ApiError(404, "node_not_found", "gone")), "vmctl: gone (404 node_not_found)")
        self.assertEqual(format_error(ApiError(502, None, "bad")), "vmctl: bad (502)")

    def test_json(self) -> None:
        """--json output is indented JSON ending in a newline."""
        self.assertEqual(format_json({"a": [1]}), '{\n  "a": [\n    1\n  ]\n}\n')


class DescriptionTests(SynchronousTestCase):
    def test_full(self) -> None:
        """Every field of a description, aligned; the disk with its sizes, the address with its gateway."""
        text = format_description({
            **NODE, "ip": "10.77.0.2", "protected": True, "snapshot": False, "agent_connected": True, "pid": 4242,
            "storage": "image", "image": "default", "kernel": "/i/vmlinux", "initrd": "/i/initrd.img",
            "hypervisor": "qemu microvm, tcg",
            "disk": {"path": "/s/disk.qcow2", "format": "qcow2", "size_bytes": 1 << 30, "allocated_bytes": 3 << 20,
                     "backing_file": "/i/rootfs.ext4"},
            "network": {"mode": "isolated", "policy_source": "host_group",
                        "host_group": {"allow": [], "drop": ["10.9.0.0/16"]},
                        "effective": {"allow": ["10.0.0.0/8", "1.1.1.1/32"], "drop": ["10.9.0.0/16"]},
                        "address": "10.77.0.2/30", "gateway": "10.77.0.1", "mac": "52:54:0a:4d:00:02"},
        })
        self.assertEqual(
            text,
            "hostname      demo-1\n"
            "group         demo\n"
            "status        Running\n"
            "tags          a, b\n"
            "created       2026-11-22 10:59:26\n"
            "cpus          2\n"
            "ram           512M\n"
            "arch          x86_64\n"
            "persistent    no\n"
            "protected     yes\n"
            "agent         connected\n"
            "pid           4242\n"
            "snapshot      no\n"
            "storage       image\n"
            "image         default\n"
            "disk          /s/disk.qcow2 (qcow2, 1G, 3M on the host)\n"
            "backing file  /i/rootfs.ext4\n"
            "kernel        /i/vmlinux\n"
            "initrd        /i/initrd.img\n"
            "hypervisor    qemu microvm, tcg\n"
            "network       isolated\n"
            "ip            10.77.0.2\n"
            "address       10.77.0.2/30 via 10.77.0.1\n"
            "mac           52:54:0a:4d:00:02\n"
            "bridge        -\n"
            "allow         10.0.0.0/8, 1.1.1.1/32\n"
            "drop          10.9.0.0/16\n",
        )

    def test_left_out_fields(self) -> None:
        """Fields the daemon left out (a suspended node of a group that is gone) show as -, never fail."""
        lines = dict(line.split(None, 1) if " " in line.strip() else (line.strip(), "")
                     for line in format_description({**NODE, "status": "Suspended", "snapshot": True,
                                                     "agent_connected": False}).splitlines())
        self.assertEqual((lines["status"], lines["snapshot"], lines["agent"]), ("Suspended", "yes", "not connected"))
        for key in ("pid", "disk", "network", "image", "hypervisor", "protected"):
            self.assertEqual(lines[key], "-", key)
class NodeEventTests(SynchronousTestCase):
    def test_lines(self) -> None:
        """An event is one line: id, time, type, node, status (and a userdata's exit code); a gap says what was lost."""
        event = {"id": 7, "time": "2024-01-02T03:04:05Z", "type": "paused", "hostname": "demo-1", "hostgroup": "demo",
                 "status": "Paused", "tags": []}
        self.assertEqual(format_node_event(event), "7 2024-01-02T03:04:05Z paused demo-1 Paused\n")
        self.assertEqual(format_node_event({**event, "type": "userdata_finished", "status": "Running",
                                            "exit_code": 0}),
                         "7 2024-01-02T03:04:05Z userdata_finished demo-1 Running exit=0\n")
        self.assertEqual(format_node_event({"id": 2, "type": "gap", "last_event_id": 1, "oldest_id": 3}),
                         "2 gap: events after 1 are no longer held; resuming at 3\n")
        self.assertEqual(format_node_event(event, as_json=True), json.dumps(event, separators=(",", ":")) + "\n")


class WatchEventTests(SynchronousTestCase):
    def test_lines(self) -> None:
        """An event is one line: timestamp, type and path (a directory's ending in /), an overflow its message."""
        event = {"id": 1, "type": "create", "path": "/srv/a", "timestamp": "2024-01-02T03:04:05.5Z", "size": 0,
                 "isDir": False}
        self.assertEqual(format_watch_event(event), "2024-01-02T03:04:05.5Z create /srv/a\n")
        self.assertEqual(format_watch_event({**event, "isDir": True}), "2024-01-02T03:04:05.5Z create /srv/a/\n")
        self.assertEqual(format_watch_event({**event, "type": "overflow", "path": "", "message": "12 dropped"}),
                         "2024-01-02T03:04:05.5Z overflow 12 dropped\n")

    def test_json(self) -> None:
        """With --json an event is its JSON object on one line."""
        import json

        event = {"id": 1, "type": "write", "path": "/a\nb", "size": 3, "isDir": False}
        line = format_watch_event(event, as_json=True)
        self.assertEqual((line.count("\n"), json.loads(line)), (1, event))


class StatsRowsTests(SynchronousTestCase):
    SNAPSHOT = {"totalCpus": 2, "loadAvg1": 1.5, "loadAvg5": 0.5, "memoryUsed": 100 << 20, "totalMemory": 1 << 30,
                "memoryUsedPercent": 9.77, "diskSpaceUsed": 1 << 29, "diskSpaceUsedPercent": 50.0,
                "diskReadTotal": 1 << 20, "diskWriteTotal": 2 << 20, "networkReadTotal": 0, "networkWriteTotal": 0,
                "uptime": "1h2m3s"}

    def test_rows(self) -> None:
        """A snapshot fills every column; a node without one shows its error."""
        from vmservice.cli.output import STATS_HEADERS, stats_rows

        rows = stats_rows([{"hostname": "a-1", "status": "Running", "snapshot": self.SNAPSHOT},
                           {"hostname": "a-2", "status": "Paused", "error": "the node is paused"}])
        self.assertEqual([len(row) for row in rows], [len(STATS_HEADERS)] * 2)
        self.assertEqual(rows[0][:4], ["a-1", "Running", "2", "1.50"])
        self.assertEqual(rows[0][-1], "1h2m3s")
        self.assertEqual(rows[1][:3], ["a-2", "Paused", "the node is paused"])

    def test_by_load(self) -> None:
        """Busiest per CPU first; nodes without a snapshot last."""
        from vmservice.cli.output import by_load

        stats = [{"hostname": "idle", "snapshot": {**self.SNAPSHOT, "loadAvg1": 0.1}},
                 {"hostname": "off", "error": "paused"},
                 {"hostname": "busy", "snapshot": {**self.SNAPSHOT, "loadAvg1": 1.9, "totalCpus": 1}},
                 {"hostname": "wide", "snapshot": {**self.SNAPSHOT, "loadAvg1": 2.0, "totalCpus": 4}}]
        self.assertEqual([s["hostname"] for s in by_load(stats)], ["busy", "wide", "idle", "off"])
