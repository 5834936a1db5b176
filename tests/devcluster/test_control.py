"""
Tests for :mod:`vmservice.devcluster.control`: a directory's material, and what start and stop decide from
``state.json`` (no process is started: the real run is tests/integration/test_devcluster.py).
"""

from __future__ import annotations

import os
import stat

import yaml
from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.commands import Layout
from vmservice.devcluster.control import export_line, prepare, start, stop
from vmservice.devcluster.identities import parse_tokens
from vmservice.devcluster.ports import ports_from_base
from vmservice.devcluster.state import STATE_FILE, ClusterState, Process, load_state, process_start_time, save_state


class PrepareTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
        os.mkdir(self.directory, 0o700)
        self.layout = Layout(self.directory, "/cache/entry/bin", ports_from_base(20000))
        prepare(self.layout, ["vms-a", "vms-b"])

    def test_private(self) -> None:
        """Every directory made is 0700, every file 0600."""
        for top, directories, files in os.walk(self.directory):
            for name in directories:
                self.assertEqual(stat.S_IMODE(os.stat(os.path.join(top, name)).st_mode), 0o700, name)
            for name in files:
                self.assertEqual(stat.S_IMODE(os.stat(os.path.join(top, name)).st_mode), 0o600, name)

    def test_node_files(self) -> None:
        """Each node has its kubeconfig (its own user and token) and its token file."""
        tokens = self.tokens()
        for name in ("vms-a", "vms-b"):
            with open(os.path.join(self.directory, "nodes", f"{name}.kubeconfig")) as f:
                config = yaml.safe_load(f)
            with open(os.path.join(self.directory, "nodes", f"{name}.token")) as f:
                token = f.read().strip()
            self.assertEqual(config["users"][0], {"name": f"system:node:{name}", "user": {"token": token}})
            self.assertEqual(tokens[f"system:node:{name}"], token)
            self.assertEqual(config["clusters"][0]["cluster"]["server"], "https://127.0.0.1:20000")

    def test_tokens_kept(self) -> None:
        """Preparing again (another node list) keeps the tokens handed out."""
        before = self.tokens()
        prepare(self.layout, ["vms-a", "vms-b", "vms-c"])
        after = self.tokens()
        self.assertEqual({user: after[user] for user in before}, before)
        self.assertIn("system:node:vms-c", after)

    def tokens(self) -> dict[str, str]:
        with open(os.path.join(self.directory, "tokens.csv")) as f:
            return parse_tokens(f.read())

    def test_export_line(self) -> None:
        """The export line points at the administrator's kubeconfig."""
        self.assertEqual(export_line("/d"), "export KUBECONFIG=/d/admin.kubeconfig")


class DecisionTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
        os.mkdir(self.directory, 0o700)
        self.said: list[str] = []

    def test_running_already(self) -> None:
        """A directory whose recorded processes all run is left alone: it says so and prints the export line."""
        me = process_start_time(os.getpid())
        assert me is not None
        state = ClusterState(self.directory, "/nonexistent", "https://127.0.0.1:20000", ports_from_base(20000),
                             (Process("etcd", os.getpid(), me),))
        save_state(self.directory, state)
        self.assertEqual(start(self.directory, ["vms-a"], None, "/nonexistent", self.said.append), 0)
        self.assertIn("runs in", self.said[0])
        self.assertEqual(self.said[-1], export_line(self.directory))
        self.assertEqual(load_state(self.directory), state)

    def test_stop_nothing_recorded(self) -> None:
        """Stopping a directory without a state file says so and succeeds."""
        self.assertEqual(stop(self.directory, False, self.said.append), 0)
        self.assertIn("no control plane recorded", self.said[0])

    def test_stop_gone_processes(self) -> None:
        """Stopping processes that are gone (or whose pid is another's now) signals nothing and removes the state."""
        me = process_start_time(os.getpid())
        assert me is not None
        save_state(self.directory, ClusterState(self.directory, "/x", "https://127.0.0.1:1", ports_from_base(20000),
                                                (Process("etcd", os.getpid(), me + 1),)))
        self.assertEqual(stop(self.directory, False, self.said.append), 0)
        self.assertFalse(os.path.exists(os.path.join(self.directory, STATE_FILE)))

    def test_purge(self) -> None:
        """--purge removes a control plane directory."""
        with open(os.path.join(self.directory, "ca.crt"), "w"):
            pass
        self.assertEqual(stop(self.directory, True, self.said.append), 0)
        self.assertFalse(os.path.exists(self.directory))

    def test_purge_refused(self) -> None:
        """--purge does not remove a directory that holds something but no control plane."""
        with open(os.path.join(self.directory, "precious"), "w"):
            pass
        self.assertEqual(stop(self.directory, True, self.said.append), 1)
        self.assertTrue(os.path.exists(os.path.join(self.directory, "precious")))
