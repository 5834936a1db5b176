"""
Tests for :mod:`vmservice.guest.metrics`: the parsers of ``/proc`` texts, and one request line's answer
(serving the port is tested against real guests in :mod:`tests.integration.test_stats`).
"""

from __future__ import annotations

import json
import os

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest import metrics
from vmservice.guest.metrics import handle_line, mark_ready, sample, serve_port
from vmservice.guest.procfs import (disk_totals, entropy, established_connections, load_average, memory,
                                    network_totals, open_files, space, whole_disks)

MEMINFO = """\
MemTotal:         241124 kB
MemFree:          150000 kB
MemAvailable:     190000 kB
Buffers:            2000 kB
Cached:            30000 kB
HugePages_Total:       0
"""

DISKSTATS = """\
 254       0 vda 3011 0 120000 1500 40 10 800 30 2 1700 1600 0 0 0 0
 254       1 vda1 3000 0 119000 1500 40 10 800 30 0 1700 1600 0 0 0 0
   7       0 loop0 10 0 80 0 0 0 0 0 0 0 0 0 0 0 0
 254      16 vdb 1 0 8 0 1 0 8 0 1 0 0 0 0 0 0
"""

NETDEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    5000      50    0    0    0     0          0         0     5000      50    0    0    0     0       0          0
  eth0:  123456     100    0    0    0     0          0         0    65432      90    0    0    0     0       0          0
"""

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000
   1: 0100007F:0016 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 00000000000000000000000001000000:0016 00000000000000000000000001000000:A000 01 00000000:00000000
"""


class ParserTests(SynchronousTestCase):
    def test_memory(self) -> None:
        """Values in KiB become bytes; used is total minus available."""
        got = memory(MEMINFO)
        self.assertEqual((got["totalMemory"], got["memoryAvailable"], got["memoryUsed"]),
                         (241124 * 1024, 190000 * 1024, 51124 * 1024))
        self.assertAlmostEqual(got["memoryUsedPercent"], 100 * 51124 / 241124)  # type: ignore[arg-type]

    def test_memory_without_available(self) -> None:
        """An old kernel's free + buffers + cached stands for available."""
        text = "\n".join(line for line in MEMINFO.splitlines() if not line.startswith("MemAvailable"))
        self.assertEqual(memory(text)["memoryAvailable"], (150000 + 2000 + 30000) * 1024)

    @given(st.integers(1, 1 << 40), st.integers(0, 1 << 40))
    def test_memory_consistent(self, total: int, available: int) -> None:
        """Used and available add up to total, and the percentage is within 0-100, whatever the numbers."""
        got = memory(f"MemTotal: {total} kB\nMemAvailable: {available} kB\n")
        self.assertEqual(got["memoryUsed"] + got["memoryAvailable"], total * 1024)  # type: ignore[operator]
        self.assertTrue(0 <= got["memoryUsedPercent"] <= 100)  # type: ignore[operator]

    def test_load_average(self) -> None:
        self.assertEqual(load_average("0.52 0.30 0.11 1/80 1234\n"),
                         {"loadAvg1": 0.52, "loadAvg5": 0.30, "loadAvg15": 0.11})

    def test_disks(self) -> None:
        """Whole disks only (no partitions, no loop devices); sectors are 512 bytes; in-flight I/Os summed."""
        disks = whole_disks(["vda", "vdb", "loop0", "ram0", "dm-0", "zram0"])
        self.assertEqual(disks, {"vda", "vdb"})
        self.assertEqual(disk_totals(DISKSTATS, disks),
                         {"diskReadTotal": 120008.0 * 512, "diskWriteTotal": 808.0 * 512, "diskIOInflight": 3})

    def test_network(self) -> None:
        """Every interface but loopback."""
        self.assertEqual(network_totals(NETDEV), {"networkReadTotal": 123456.0, "networkWriteTotal": 65432.0})

    def test_connections(self) -> None:
        """Established connections of both tables; listening sockets and headers are not counted."""
        self.assertEqual(established_connections(TCP, TCP6), 2)
        self.assertEqual(established_connections("", ""), 0)

    def test_entropy(self) -> None:
        self.assertEqual(entropy("256\n"), 256)

    def test_open_files(self) -> None:
        """Descriptors of every process directory are counted; other entries are not."""
        proc = self.mktemp()
        for pid, fds in (("1", 3), ("42", 2)):
            os.makedirs(os.path.join(proc, pid, "fd"))
            for fd in range(fds):
                open(os.path.join(proc, pid, "fd", str(fd)), "w").close()
        os.makedirs(os.path.join(proc, "sys", "fd"))
        open(os.path.join(proc, "sys", "fd", "0"), "w").close()
        os.makedirs(os.path.join(proc, "7"))  # no fd directory: gone or a kernel thread
        self.assertEqual(open_files(proc), 5)

    @given(st.integers(1, 65536), st.integers(0, 1 << 30), st.data())
    def test_space(self, frsize: int, blocks: int, data: st.DataObject) -> None:
        """Used + free never exceeds total; the percentage is as df shows it, within 0-100."""
        bfree = data.draw(st.integers(0, blocks))
        bavail = data.draw(st.integers(0, bfree))
        got = space(frsize, blocks, bfree, bavail)
        self.assertEqual(got["diskSpaceTotal"], blocks * frsize)
        self.assertLessEqual(got["diskSpaceUsed"] + got["diskSpaceFree"], got["diskSpaceTotal"])  # type: ignore[operator]
        self.assertTrue(0 <= got["diskSpaceUsedPercent"] <= 100)  # type: ignore[operator]


class AnswerTests(SynchronousTestCase):
    def test_snapshot(self) -> None:
        """A request gets one line: its id and the sampled fields."""
        line = handle_line(b"snapshot 7", lambda: {"totalCpus": 2})
        self.assertEqual(line, b'{"id":"7","totalCpus":2}\n')

    def test_unknown_request(self) -> None:
        self.assertEqual(json.loads(handle_line(b"reboot 3"))["id"], "3")
        self.assertIn("unknown request", json.loads(handle_line(b"reboot 3"))["error"])

    def test_sampling_fails(self) -> None:
        """A failing sample is an error answer, not the end of the agent."""
        def broken() -> dict[str, object]:
            raise OSError("no /proc")

        self.assertEqual(json.loads(handle_line(b"snapshot 1", broken)),
                         {"id": "1", "error": "sampling failed: no /proc"})

    def test_sample_of_this_machine(self) -> None:
        """Every field of the contract is sampled (from the host's own /proc)."""
        got = sample()
        for name in ("hostname", "arch", "timestamp", "uptimeSeconds", "totalCpus", "totalMemory", "memoryUsed",
                     "memoryAvailable", "memoryUsedPercent", "loadAvg1", "loadAvg5", "loadAvg15", "diskReadTotal",
                     "diskWriteTotal", "networkReadTotal", "networkWriteTotal", "diskIOInflight", "openConnections",
                     "openFiles", "entropy", "diskSpaceTotal", "diskSpaceUsed", "diskSpaceFree",
                     "diskSpaceUsedPercent"):
            self.assertIn(name, got)



class _Ready(Exception):
    """Raised by the test's ``ready`` callback, to leave :func:`serve_port`'s endless loop."""


class ReadyTests(SynchronousTestCase):
    """The metrics agent says when it serves (a template's guest agent waits for it before it is frozen)."""

    def test_mark_ready(self) -> None:
        """The file is created."""
        path = os.path.join(self.mktemp())
        mark_ready(path)
        self.assertTrue(os.path.isfile(path))

    def test_mark_ready_fails(self) -> None:
        """A file that cannot be created is logged, not raised."""
        logged: list[str] = []
        self.patch(metrics, "_log", logged.append)
        mark_ready(os.path.join(self.mktemp(), "missing", "ready"))
        self.assertEqual(len(logged), 1)
        self.assertIn("cannot create", logged[0])

    def test_ready_once_the_port_is_open(self) -> None:
        """:func:`serve_port` calls ``ready`` once it opened its port, before it waits for a host."""
        import signal

        path = self.mktemp()
        os.mkfifo(path)
        opened: list[int] = []
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])

        def restore() -> None:  # serve_port blocks SIGIO (and would take any that came) in this process
            signal.sigtimedwait({signal.SIGIO}, 0)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

        self.addCleanup(restore)

        def ready() -> None:
            opened.extend(int(fd) for fd in os.listdir("/proc/self/fd")
                          if os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(path))
            raise _Ready()

        self.assertRaises(_Ready, serve_port, path, ready)
        self.assertEqual(len(opened), 1)
        os.close(opened[0])
