"""
Dealing the integration modules into parallel shards and reading module
times back from trial's ``timing`` output (tests/shards.py).
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests import shards


class DealTests(SynchronousTestCase):
    def test_balanced_by_time(self) -> None:
        """Longest first, each to the shard with the least time so far."""
        seconds = {"a": 100.0, "b": 60.0, "c": 50.0, "d": 10.0}
        self.assertEqual(shards.deal(["a", "b", "c", "d"], seconds, 2), [["a", "d"], ["b", "c"]])

    def test_unrecorded_module_counts_as_the_median(self) -> None:
        seconds = {"a": 30.0, "b": 20.0, "c": 10.0}
        self.assertEqual(shards.deal(["a", "b", "c", "new"], seconds, 2), [["a", "c"], ["b", "new"]])

    def test_every_module_once(self) -> None:
        names = shards.modules()
        dealt = shards.deal(names, shards.durations(), 3)
        self.assertEqual(sorted(name for shard in dealt for name in shard), names)
        self.assertEqual(len(dealt), 3)

    def test_modules_of_packages(self) -> None:
        """Modules in the integration tests' packages are found, by dotted name."""
        names = shards.modules()
        self.assertIn("tests.integration.test_warm", names)
        self.assertIn("tests.integration.guest.test_agent", names)
        self.assertNotIn("tests.integration.daemon", names)

    def test_no_empty_shard(self) -> None:
        self.assertEqual(shards.deal(["a"], {}, 4), [["a"]])


class ModuleTimesTests(SynchronousTestCase):
    def test_tagged_lines_of_two_shards(self) -> None:
        """Each time follows its test in the same shard, whatever the other shard wrote between."""
        text = "\n".join([
            "[shard 1] tests.integration.test_a.A.test_x ... [OK]",
            "[shard 2] tests.integration.test_b.B.test_y ... cp timings: {}",
            "[shard 1] (1.500 secs)",
            "[shard 2] [OK]",
            "[shard 2] (2.000 secs)",
            "[shard 1] tests.integration.test_a.A.test_z ... [FAIL]",
            "[shard 1] (0.250 secs)",
        ])
        self.assertEqual(shards.module_times(text), {"tests.integration.test_a": 1.8, "tests.integration.test_b": 2.0})

    def test_module_of_a_package(self) -> None:
        text = "tests.integration.guest.test_agent.AgentTests.test_x ... [OK]\n(2.500 secs)\n"
        self.assertEqual(shards.module_times(text), {"tests.integration.guest.test_agent": 2.5})

    def test_untagged(self) -> None:
        text = "tests.integration.test_a.A.test_x ... [OK]\n(3.000 secs)\n"
        self.assertEqual(shards.module_times(text), {"tests.integration.test_a": 3.0})
