"""
Every figure README.md, docs/performance.md, docs/reliability.md and docs/cluster.md publish
is the figure of the results file it cites (:mod:`bench.publish`), and every
results file is written by its benchmark through :mod:`bench.recording`,
which ``make bench`` runs; how ``bench/faults.py`` reads trial's output and
``tests/fuzzing.py`` schemathesis'.
Files only: no process, no guest.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from bench import faults, publish, recording
from tests import fuzzing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
#: Modules of bench/ that are no benchmark: helpers, and the probe bench/exec_spawn.py runs in a guest.
HELPERS = {"child_output.py", "cluster_vms.py", "earlier.py", "exec_spawn_probe.py", "loadmix.py", "publish.py", "recording.py"}


def _read(*path: str) -> str:
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def _benchmarks() -> dict[str, str]:
    """The benchmark scripts of bench/, by file name, with their source."""
    return {name: _read("bench", name) for name in sorted(os.listdir(BENCH))
            if name.endswith(".py") and name not in HELPERS}


def _results(text: dict[str, dict[str, Any]]) -> publish.Results:
    """A :class:`publish.Results` over ``text`` (file name to content) instead of bench/results/."""
    results = publish.Results("/nonexistent")
    results._read.update(text)
    return results


class PublishedFigureTests(SynchronousTestCase):
    """The documents against bench/results/."""

    def test_figures_equal_their_results(self) -> None:
        """
        Rewriting the documents (README.md, docs/performance.md,
        docs/reliability.md) from bench/results/ changes nothing: each marked figure is its file's value, at the
        precision shown.
        """
        load = publish.Results()
        for document in publish.DOCUMENTS:
            text = _read(document)
            found = publish.figures(document, text, load)
            drifted = [f"{f.document}:{f.line}: shows {f.shown}, {f.source} gives {f.expected}"
                       for f in found if f.shown != f.expected]
            self.assertEqual(drifted, [])
            self.assertEqual(publish.rewrite(text, found), text)

    def test_documents_cite_results(self) -> None:
        """Every document marks figures (the scheme is in use, not silently dropped)."""
        load = publish.Results()
        for document in publish.DOCUMENTS:
            self.assertGreater(len(publish.figures(document, _read(document), load)), 5, document)

    def test_every_figure_cited(self) -> None:
        """
        Every figure in s, ms, MB/s or × of every document cites a results
        file, or stands in a block saying that no file holds it.
        """
        for document in publish.DOCUMENTS:
            self.assertEqual(publish.unmarked(_read(document)), [], document)

    def test_unrecorded_blocks_say_so(self) -> None:
        """Each unrecorded block tells the reader, in its rendered text, that no results file holds its figures."""
        for document in publish.DOCUMENTS:
            for block in publish.UNRECORDED.finditer(_read(document)):
                self.assertIn("no results file", block[0].replace("\n", " ").lower(), document)

    def test_named_results_exist(self) -> None:
        """Every ``bench/results/NAME.json`` the documents name exists."""
        for document in publish.DOCUMENTS:
            for name in re.findall(r"bench/results/([\w.-]+\.json)", _read(document)):
                self.assertTrue(os.path.exists(os.path.join(publish.RESULTS, name)), f"{document}: {name}")


class FigureTests(SynchronousTestCase):
    """How a marker finds its figure and its value."""

    results = {"b.json": {"boot_s": {"median": 5.8811, "samples": [4.52, 6.49, 5.88]},
                          "ratio_a_over_b": 1.8024, "cp": {"upload_mb_per_s": 91.83},
                          "rss_bytes": 3 * 2 ** 20, "rss_kib": 38.5, "steps_ms": {"load": {"median": 51.5}},
                          "rounds": [{"x_s": 0.25}], "name": "tcg"}}

    def check(self, text: str) -> list[publish.Figure]:
        return publish.figures("doc.md", text, _results(self.results))

    def test_seconds(self) -> None:
        """A figure in s of a ``_s`` key keeps the decimals shown."""
        [figure] = self.check("create 5.88 s<!-- figure: b.json#boot_s.median --> here")
        self.assertEqual((figure.shown, figure.expected, figure.line), ("5.88 s", "5.88 s", 1))

    def test_milliseconds(self) -> None:
        """ms of a ``_s`` key is a thousand times its value; ms of a ``_ms`` key its value."""
        found = self.check("a 5881 ms<!-- figure: b.json#boot_s.median -->, b 52 ms<!-- figure: "
                           "b.json#steps_ms.load.median -->, c 250 ms<!-- figure: b.json#rounds.0.x_s -->")
        self.assertEqual([f.expected for f in found], ["5881 ms", "52 ms", "250 ms"])

    def test_drift(self) -> None:
        """A figure that is not its file's shows up, and the rewrite puts the file's in its place."""
        text = "ratio **1.90×**<!-- figure: b.json#ratio_a_over_b -->; 92 MB/s<!-- figure: b.json#cp.upload_mb_per_s -->"
        found = self.check(text)
        self.assertEqual([(f.shown, f.expected) for f in found], [("**1.90×**", "**1.80×**"), ("92 MB/s", "92 MB/s")])
        self.assertEqual(publish.rewrite(text, found),
                         "ratio **1.80×**<!-- figure: b.json#ratio_a_over_b -->; "
                         "92 MB/s<!-- figure: b.json#cp.upload_mb_per_s -->")

    def test_range(self) -> None:
        """A range cites a list: its smallest and largest item."""
        [figure] = self.check("(4.5–6.5 s<!-- figure: b.json#boot_s.samples -->)")
        self.assertEqual(figure.expected, "4.5–6.5 s")

    def test_sizes(self) -> None:
        """Bytes shown in MiB or MB, KiB as they are."""
        found = self.check("3.0 MiB<!-- figure: b.json#rss_bytes --> 3.1 MB<!-- figure: b.json#rss_bytes --> "
                           "38 KiB<!-- figure: b.json#rss_kib -->")
        self.assertEqual([f.expected for f in found], ["3.0 MiB", "3.1 MB", "38 KiB"])

    def test_kind_named(self) -> None:
        """A marker ending ``as KIND`` says what the value is where its key's name says otherwise."""
        results = {"d.json": {"health_s": {"within_1s": 16}}}
        [figure] = publish.figures("doc.md", "all 16<!-- figure: d.json#health_s.within_1s as count -->",
                                   _results(results))
        self.assertEqual((figure.expected, figure.source), ("16", "d.json#health_s.within_1s"))
        self.assertRaises(publish.FigureError, publish.figures, "doc.md",
                          "all 16<!-- figure: d.json#health_s.within_1s -->", _results(results))

    def test_unit_in_heading(self) -> None:
        """
        A figure shown without its unit (a table's heading gives it) names
        the unit at its marker's end, and is scaled to it; a figure shown
        with another unit than its marker names is an error.
        """
        found = self.check("| 5.88<!-- figure: b.json#boot_s.median in s --> | "
                           "5881<!-- figure: b.json#boot_s.median in ms --> | 3.0<!-- figure: b.json#rss_bytes in MiB --> |")
        self.assertEqual([(f.shown, f.expected) for f in found], [("5.88", "5.88"), ("5881", "5881"), ("3.0", "3.0")])
        text = "| 6.00<!-- figure: b.json#boot_s.median in s --> |"
        self.assertEqual(publish.rewrite(text, self.check(text)), "| 5.88<!-- figure: b.json#boot_s.median in s --> |")
        self.assertRaises(publish.FigureError, self.check, "5.88<!-- figure: b.json#boot_s.median -->")
        self.assertRaises(publish.FigureError, self.check, "5.88 s<!-- figure: b.json#boot_s.median in ms -->")
        self.assertRaises(publish.FigureError, self.check, "1.80<!-- figure: b.json#ratio_a_over_b in s -->")

    def test_unit_mismatch(self) -> None:
        """A unit the key's value cannot be shown in is an error, not a guess."""
        self.assertRaises(publish.FigureError, self.check, "5.88 MB/s<!-- figure: b.json#boot_s.median -->")
        self.assertRaises(publish.FigureError, self.check, "1.8 s<!-- figure: b.json#ratio_a_over_b -->")

    def test_missing(self) -> None:
        """A key, file or figure that is not there is an error naming the line."""
        error = self.assertRaises(publish.FigureError, self.check, "\n5.88 s<!-- figure: b.json#boot_s.mean -->")
        self.assertIn("doc.md:2", str(error))
        self.assertRaises(publish.FigureError, self.check, "5.88 s<!-- figure: c.json#boot_s.median -->")
        self.assertRaises(publish.FigureError, self.check, "fast<!-- figure: b.json#boot_s.median -->")
        self.assertRaises(publish.FigureError, self.check, "1 s<!-- figure: b.json#name -->")

    def test_unmarked_code_and_versions(self) -> None:
        """Inline code is literal text, not a figure; nor is a version of OpenAPI."""
        text = "a `{\"uid\": 56228.0}` and `sleep 2 s`, OpenAPI 3.1, but 2.5 s\n"
        self.assertEqual(publish.unmarked(text), [(1, "2.5 s")])

    def test_unmarked(self) -> None:
        """
        Figures in s, ms, MB/s, × or % and decimals need a marker, except in
        code and in unrecorded blocks; sizes, counts, versions and targets
        do not.
        """
        text = ("a 5.88 s<!-- figure: b.json#boot_s.median --> and 6.00 s, **1.8×**, 19.8 MB/s, 4–6 ms\n"
                "256 MiB, 2.8 MiB, 16 nodes, tb-size=64, QEMU 7.2, 127.0.0.1, target ≤ 1.3×, ratio 0.84, 3 %\n"
                "<!-- unrecorded -->\nno results file: 3.14 s\n<!-- /unrecorded -->\n```\nsleep 2 s\n```\n")
        self.assertEqual(publish.unmarked(text), [(1, "6.00 s"), (1, "**1.8×**"), (1, "19.8 MB/s"), (1, "4–6 ms"),
                                                  (2, "0.84"), (2, "3 %")])


class RecordingTests(SynchronousTestCase):
    """What :mod:`bench.recording` adds to every results file."""

    def test_written_with_provenance(self) -> None:
        """The result is written with a ``run`` entry first, made from the run :func:`begin` noted."""
        path = os.path.join(self.mktemp(), "results", "x.json")
        run = recording.Run(started_at="2026-11-28T20:40:00Z", load_average_before=[0.5, 0.4, 0.3],
                            argv=["bench/x.py"])
        recording.write_result(path, {"benchmark": "x", "figure_s": 1.5}, run,
                               describe=lambda run: {"started_at": run.started_at})
        with open(path) as f:
            written = json.load(f)
        self.assertEqual(list(written), ["run", "benchmark", "figure_s"])
        self.assertEqual(written["run"], {"started_at": "2026-11-28T20:40:00Z"})

    def test_run_is_reserved(self) -> None:
        """A benchmark cannot write a ``run`` key of its own."""
        run = recording.Run(started_at="", load_average_before=[], argv=[])
        self.assertRaises(ValueError, recording.write_result, os.path.join(self.mktemp(), "x.json"),
                          {"run": 1}, run)

    def test_load_average(self) -> None:
        """The three load averages of ``/proc/loadavg``'s format."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("1.01 1.92 2.11 2/88 2879\n")
        self.assertEqual(recording.load_average(path), [1.01, 1.92, 2.11])

    def test_results_carry_provenance(self) -> None:
        """
        A results file with a ``run`` entry has every field of it: the
        commit, the times, the load before and after, the machine.
        """
        fields = {"script", "argv", "commit", "dirty", "started_at", "finished_at", "load_average_before",
                  "load_average_after", "machine"}
        machine = {"cpu_count", "cpu_model", "mem_total_kib", "kernel", "qemu", "dev_kvm"}
        for name in sorted(os.listdir(publish.RESULTS)):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(publish.RESULTS, name)) as f:
                run = json.load(f).get("run")
            if run is not None:
                self.assertEqual(fields - set(run), set(), name)
                self.assertEqual(machine - set(run["machine"]), set(), name)


class BenchmarkTests(SynchronousTestCase):
    """The benchmarks, their results files and ``make bench``."""

    def test_written_through_recording(self) -> None:
        """No benchmark writes JSON itself: each one's results go through ``recording.write_result``."""
        for name, source in _benchmarks().items():
            self.assertNotIn("json.dump(", source, name)
            self.assertIn("write_result(", source, name)
            self.assertIn("begin()", source, name)

    def test_make_bench_runs_every_benchmark(self) -> None:
        """``make bench`` runs every benchmark script of bench/, and publishes the figures last."""
        makefile = _read("Makefile")
        recipe = makefile[makefile.index("\nbench: "):]
        recipe = recipe[:recipe.index("\n\n")]
        run = re.findall(r"^\t\$\(BIN\)/python bench/(\w+\.py)", recipe, re.M)
        self.assertEqual(set(_benchmarks()) - set(run), set())
        self.assertEqual(run[-1], "publish.py")

    def test_every_results_file_has_its_benchmark(self) -> None:
        """Each file of bench/results/ is named by the benchmark that writes it (a plot is its results file's)."""
        sources = "\n".join(_benchmarks().values())
        names = sorted(os.listdir(publish.RESULTS))
        for name in names:
            if name.endswith(".png") and name[:-4] + ".json" in names:
                continue
            self.assertTrue(name.endswith(".json"), name)
            self.assertIn(f'"{name}"', sources, name)


#: trial's ``timing`` output for a module with a test that passes, one that writes a line before its
#: outcome, one that fails, one in error and one skipped.
TRIAL_OUTPUT = """\
Running tests shuffled with seed 0

tests.integration.test_fault_x.T.test_error ... [ERROR]
(0.001 secs)
tests.integration.test_fault_x.T.test_ok ... [OK]
(12.500 secs)
tests.integration.test_fault_x.T.test_print ... noise in the middle
[OK]
(0.250 secs)
tests.integration.test_fault_x.T.test_fail ... [FAILURE]
(3.000 secs)
tests.integration.test_fault_x.T.test_skip ... [SKIPPED]
(0.000 secs)

===============================================================================
[SKIPPED]
no

tests.integration.test_fault_x.T.test_skip
===============================================================================
[FAIL]
Traceback (most recent call last):
  File "tests/integration/test_fault_x.py", line 4, in test_fail
twisted.trial.unittest.FailTest: 1 != 2

tests.integration.test_fault_x.T.test_fail
===============================================================================
[ERROR]
Traceback (most recent call last):
builtins.RuntimeError: boom

tests.integration.test_fault_x.T.test_error
-------------------------------------------------------------------------------
Ran 5 tests in 15.751s

FAILED (skips=1, failures=1, errors=1, successes=2)
"""


class FaultsTests(SynchronousTestCase):
    """How ``bench/faults.py`` finds the fault-injection modules and reads trial's output."""

    def test_modules(self) -> None:
        """Every ``tests/integration/test_fault*.py`` is found, ``test_faults.py`` among them."""
        found = faults.modules()
        self.assertIn("tests.integration.test_faults", found)
        self.assertIn("tests.integration.test_fault_agent", found)
        self.assertEqual(found, sorted(found))
        self.assertTrue(all(name.startswith("tests.integration.test_fault") for name in found), found)

    def test_parse(self) -> None:
        """Trial's counts from its closing lines; each test's outcome and seconds from its own lines."""
        parsed = faults.parse("tests.integration.test_fault_x", TRIAL_OUTPUT)
        tests = {test["id"].rpartition(".")[2]: (test["outcome"], test["seconds"]) for test in parsed.pop("tests")}
        self.assertEqual(parsed, {"tests_run": 5, "tests_passed": 2, "failed_or_errored": 2, "failures": 1,
                                  "errors": 1, "skips": 1, "trial_status": "FAILED", "trial_seconds": 15.751})
        self.assertEqual(tests, {"test_error": ("failed", 0.001), "test_ok": ("passed", 12.5),
                                 "test_print": ("passed", 0.25), "test_fail": ("failed", 3.0),
                                 "test_skip": ("skipped", 0.0)})

    def test_parse_passed(self) -> None:
        """A module whose tests all pass."""
        output = ("tests.integration.test_faults.K.test_a ... [OK]\n(33.100 secs)\n\n" + "-" * 79
                  + "\nRan 1 tests in 33.120s\n\nPASSED (successes=1)\n")
        parsed = faults.parse("tests.integration.test_faults", output)
        self.assertEqual((parsed["tests_run"], parsed["tests_passed"], parsed["failed_or_errored"]), (1, 1, 0))
        self.assertEqual(parsed["tests"], [{"id": "tests.integration.test_faults.K.test_a", "outcome": "passed",
                                            "seconds": 33.1}])

    def test_parse_module_not_imported(self) -> None:
        """A module that cannot be imported is one test in error; output without trial's summary counts none."""
        output = ("tests.integration.test_fault_y ... [ERROR]\n(0.000 secs)\n\n" + "=" * 79 + "\n[ERROR]\n"
                  "Traceback (most recent call last):\nbuiltins.ModuleNotFoundError: No module named 'x'\n\n"
                  "tests.integration.test_fault_y\n" + "-" * 79 + "\nRan 1 tests in 0.021s\n\nFAILED (errors=1)\n")
        parsed = faults.parse("tests.integration.test_fault_y", output)
        self.assertEqual((parsed["tests_run"], parsed["tests_passed"], parsed["failed_or_errored"]), (1, 0, 1))
        self.assertEqual([test["outcome"] for test in parsed["tests"]], ["failed"])
        crashed = faults.parse("tests.integration.test_fault_y", "tests.integration.test_fault_y.T.test_a ... ")
        self.assertEqual((crashed["tests_run"], crashed["tests_passed"], crashed["trial_status"]), (None, None, None))
        self.assertEqual([test["outcome"] for test in crashed["tests"]], ["unknown"])

    def test_totals(self) -> None:
        """The modules' figures added up; a module that did not pass is named."""
        results: list[dict[str, Any]] = [
            {"module": "a", "tests_run": 3, "tests_passed": 3, "failed_or_errored": 0, "skips": 0, "seconds": 50.5,
             "ok": True},
            {"module": "b", "tests_run": None, "tests_passed": None, "failed_or_errored": None, "skips": 0,
             "seconds": 1.0, "ok": False}]
        self.assertEqual(faults.totals(results), {"modules": 2, "tests_run": 3, "tests_passed": 3,
                                                  "failed_or_errored": 0, "skips": 0, "modules_not_passed": ["b"],
                                                  "seconds": 51.5})


#: The end of schemathesis' output for a run with two failures (the parts that name them).
SCHEMATHESIS_OUTPUT = """\
=================================== FAILURES ===================================
__________________________ PATCH /vm/{hostname}/tags ___________________________
1. Test Case ID: iNNIDe

- ST202 Schema-valid request rejected

    Valid data should have been accepted

2. Test Case ID: x0

- ST202 Schema-valid request rejected
- Server error

________________________________ POST /secrets _________________________________
1. Test Case ID: xBX1nS

- ST202 Schema-valid request rejected

=================================== WARNINGS ===================================

  - DELETE /hostgroup/{name}/nodes/{node}

=================================== SUMMARY ====================================

Test cases:
  2871 generated, 4 found 2 unique failures, 48 skipped
"""


class FuzzTests(SynchronousTestCase):
    """What ``tests/fuzzing.py`` reads of schemathesis' output for ``bench/fuzz.py``."""

    def test_failures(self) -> None:
        """Each failed operation with its checks, from the FAILURES section only."""
        self.assertEqual(fuzzing.failures(SCHEMATHESIS_OUTPUT), [
            {"operation": "PATCH /vm/{hostname}/tags",
             "checks": ["ST202 Schema-valid request rejected", "Server error"]},
            {"operation": "POST /secrets", "checks": ["ST202 Schema-valid request rejected"]},
        ])
        self.assertEqual(fuzzing.failures("no failures\n"), [])

    def test_counts(self) -> None:
        """The cases and unique failures of schemathesis' summary."""
        self.assertEqual(fuzzing._counts(SCHEMATHESIS_OUTPUT), {"cases": 2871, "failures": 2})
