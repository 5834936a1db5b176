"""
Tests for :mod:`vmservice.devcluster.state`: state.json and the processes' start times.
"""

from __future__ import annotations

import os
import stat

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.ports import Ports
from vmservice.devcluster.state import (STATE_FILE, ClusterState, Process, is_running, load_state,
                                        process_start_time, save_state)

STATE = ClusterState("/d", "/cache/entry/bin", "https://127.0.0.1:16443", Ports(16443, 16444, 16445, 16446, 16447),
                     (Process("etcd", 100, 5000), Process("kube-apiserver", 101, 5001)))


def stat_line(pid: int, command: str, state: str, start_time: int) -> bytes:
    """A /proc/PID/stat line: pid, (command), state, 18 fields, then the start time and more."""
    middle = " ".join(["1"] * 18)
    return f"{pid} ({command}) {state} {middle} {start_time} 123 456\n".encode()


class StateFileTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        """A state saved is loaded back equal, from a 0600 file."""
        directory = self.mktemp()
        os.mkdir(directory)
        save_state(directory, STATE)
        self.assertEqual(load_state(directory), STATE)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(directory, STATE_FILE)).st_mode), 0o600)

    def test_none(self) -> None:
        """No state file: None."""
        directory = self.mktemp()
        os.mkdir(directory)
        self.assertIsNone(load_state(directory))

    def test_not_through_a_link(self) -> None:
        """A link in place of the state file is not followed."""
        directory = self.mktemp()
        os.mkdir(directory)
        save_state(directory, STATE)
        os.rename(os.path.join(directory, STATE_FILE), os.path.join(directory, "elsewhere"))
        os.symlink("elsewhere", os.path.join(directory, STATE_FILE))
        self.assertRaises(OSError, load_state, directory)

    @given(st.one_of(st.binary(max_size=200),
                     st.sampled_from([b"{}", b"[]", b'{"directory": 1}', STATE.to_json().replace(b"100", b"-100"),
                                      STATE.to_json().replace(b"5000", b"true"), STATE.to_json().replace(b"16443,", b'"x",')])))
    @settings(max_examples=150, deadline=None)
    def test_property_malformed(self, data: bytes) -> None:
        """Anything but a state file is a ValueError, never another exception."""
        try:
            ClusterState.from_json(data)
        except ValueError:
            pass


class StartTimeTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.proc = self.mktemp()
        os.mkdir(self.proc)

    def process(self, pid: int, line: bytes) -> None:
        os.mkdir(os.path.join(self.proc, str(pid)))
        with open(os.path.join(self.proc, str(pid), "stat"), "wb") as f:
            f.write(line)

    def test_start_time(self) -> None:
        """The start time is the 22nd field, counted after the command's closing parenthesis (which may hold any)."""
        self.process(100, stat_line(100, "etcd", "S", 5000))
        self.process(101, stat_line(101, "a) R 1 2 (b", "S", 7000))
        self.assertEqual(process_start_time(100, self.proc), 5000)
        self.assertEqual(process_start_time(101, self.proc), 7000)

    def test_gone_or_zombie(self) -> None:
        """A pid that names no process, or a zombie, has no start time."""
        self.process(102, stat_line(102, "etcd", "Z", 5000))
        self.assertIsNone(process_start_time(99, self.proc))
        self.assertIsNone(process_start_time(102, self.proc))

    def test_is_running(self) -> None:
        """A recorded process runs only if its pid's start time is still the recorded one (not a recycled pid)."""
        self.process(100, stat_line(100, "etcd", "S", 5000))
        self.process(101, stat_line(101, "bash", "S", 9999))
        self.assertTrue(is_running(Process("etcd", 100, 5000), self.proc))
        self.assertFalse(is_running(Process("kube-apiserver", 101, 5001), self.proc))
        self.assertFalse(is_running(Process("kube-scheduler", 103, 5002), self.proc))

    def test_this_process(self) -> None:
        """The real /proc: this process has a start time, and it does not change."""
        start = process_start_time(os.getpid())
        self.assertIsNotNone(start)
        self.assertEqual(process_start_time(os.getpid()), start)
