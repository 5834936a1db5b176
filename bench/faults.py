"""
Fault injection: the integration modules that put a fault in the middle of
an operation (every ``tests/integration/test_fault*.py``, found when the
script runs, so a new one counts), run with trial one module after another,
with what each test's outcome was.

Each module runs as ``make test`` runs integration tests (trial, ``--random=0``,
the ``timing`` reporter), its output shown as it comes.  From trial's lines
(``TEST_ID ... [OK]`` and the time each test took, ``Ran N tests``,
``PASSED (successes=N)`` or ``FAILED (failures=N, errors=N, ...)``) it
writes ``bench/results/faults.json``: per module and in total, the tests
run (each a fault injected), those passed (the faults survived: the
operation ended as documented and nothing was lost or left stray), those
failed or errored (trial's count of failures, errors and unexpected
successes), the skips and the seconds, and the ids of the tests that passed
and of those that did not.  Exits 1 when a test failed or a module's trial
did not succeed (the results file is written all the same).

    .venv/bin/python bench/faults.py [--modules tests.integration.test_fault_agent ...]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.integration.daemon import ensure_image  # noqa: E402
from bench.child_output import run_teed  # noqa: E402
from bench.recording import begin, write_result  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results", "faults.json")
#: trial as ``make test`` runs it (the Makefile's TRIAL), with the reporter whose lines name each test.
TRIAL = [sys.executable, "-b", "-W", "ignore::BytesWarning:twisted.web.http_headers", "-m", "twisted.trial",
         "--random=0", "--reporter=timing"]

#: A test's line: its id, then (once it has ended, possibly after what the test wrote) its outcome.
_TEST = re.compile(r"^(?P<id>\w+(?:\.\w+)+) \.\.\.(?: (?P<rest>.*))?$")
#: Outcomes at the end of a line (``[OK]``, ``[FAILURE]``...; an error in a clean-up can add one).
_OUTCOMES = re.compile(r"(?:\[(?:OK|FAIL|FAILURE|ERROR|SKIPPED|TODO|SUCCESS!\?!)\])+$")
_OUTCOME = re.compile(r"\[([^]]+)\]")
_SECONDS = re.compile(r"^\((?P<seconds>\d+(?:\.\d+)?) secs\)$")
_RAN = re.compile(r"^Ran (?P<count>\d+) tests? in (?P<seconds>\d+(?:\.\d+)?)s$")
_SUMMARY = re.compile(r"^(?P<status>PASSED|FAILED)(?: \((?P<fields>[^)]*)\))?$")
#: The closing part's headings, before the tracebacks and the ids of the tests they are of.
_FLAVORS = {"[FAIL]": "failed", "[ERROR]": "failed", "[SUCCESS!?!]": "failed", "[SKIPPED]": "skipped",
            "[TODO]": "expected failure"}


def modules() -> list[str]:
    """The fault-injection modules, by dotted name: ``tests/integration/test_fault*.py`` (``test_faults.py`` too)."""
    paths = glob.glob(os.path.join(ROOT, "tests", "integration", "test_fault*.py"))
    return sorted(os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".") for path in paths)


def _outcome(markers: list[str]) -> str:
    if any(marker in ("FAIL", "FAILURE", "ERROR", "SUCCESS!?!") for marker in markers):
        return "failed"
    if "SKIPPED" in markers:
        return "skipped"
    if "TODO" in markers:
        return "expected failure"
    return "passed" if markers else "unknown"


def parse(module: str, output: str) -> dict[str, Any]:
    """
    What trial's ``timing`` output for ``module`` says: the tests run,
    passed, failed or errored, skipped, by trial's closing lines (``None``
    where trial wrote none), and each test's id, outcome and seconds.
    """
    tests: dict[str, dict[str, Any]] = {}
    pending: str | None = None
    markers: list[str] = []
    ran: re.Match[str] | None = None
    summary: re.Match[str] | None = None
    flavor: str | None = None
    for line in output.splitlines():
        line = line.rstrip()
        test = _TEST.match(line)
        if test and (test["id"] == module or test["id"].startswith(module + ".")):
            pending, markers = test["id"], []
            tests[pending] = {"id": pending, "outcome": "unknown", "seconds": None}
            line = test["rest"] or ""
        if pending is not None:
            outcomes = _OUTCOMES.search(line)
            if outcomes:
                markers += _OUTCOME.findall(outcomes[0])
                tests[pending]["outcome"] = _outcome(markers)
            seconds = _SECONDS.match(line)
            if seconds:
                tests[pending]["seconds"] = float(seconds["seconds"])
                pending = None
            continue
        if line in _FLAVORS:
            flavor = _FLAVORS[line]
        elif flavor and (line == module or line.startswith(module + ".")) and " " not in line:
            # An id under a heading of the closing part: one the per-test lines may not have shown
            # (an error outside a test, as in a module that cannot be imported).
            entry = tests.setdefault(line, {"id": line, "outcome": flavor, "seconds": None})
            if flavor == "failed":
                entry["outcome"] = "failed"
        ran = _RAN.match(line) or ran
        summary = _SUMMARY.match(line) or summary
    counts = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", summary["fields"] or "")} if summary else {}
    return {
        "tests_run": int(ran["count"]) if ran else None,
        "tests_passed": counts.get("successes", 0) + counts.get("expectedFailures", 0) if summary else None,
        "failed_or_errored": (counts.get("failures", 0) + counts.get("errors", 0)
                              + counts.get("unexpectedSuccesses", 0)) if summary else None,
        "failures": counts.get("failures", 0),
        "errors": counts.get("errors", 0),
        "skips": counts.get("skips", 0),
        "trial_status": summary["status"] if summary else None,
        "trial_seconds": float(ran["seconds"]) if ran else None,
        "tests": list(tests.values()),
    }


def run_module(module: str) -> dict[str, Any]:
    """Run ``module`` with trial (its output shown as it comes) and say how it went."""
    started = time.monotonic()
    status, output = run_teed(TRIAL + [module], cwd=ROOT)
    seconds = time.monotonic() - started
    result = {"module": module, **parse(module, output), "trial_exit": status,
              "seconds": round(seconds, 1)}
    # What trial did not sum up (it crashed, or could not start) is a failure, not nothing.
    result["ok"] = status == 0 and result["trial_status"] == "PASSED" and result["failed_or_errored"] == 0
    return result


def totals(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The modules' figures added up."""
    def total(key: str) -> int:
        return sum(result[key] or 0 for result in results)

    return {
        "modules": len(results),
        "tests_run": total("tests_run"),
        "tests_passed": total("tests_passed"),
        "failed_or_errored": total("failed_or_errored"),
        "skips": total("skips"),
        "modules_not_passed": [result["module"] for result in results if not result["ok"]],
        "seconds": round(sum(result["seconds"] for result in results), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", nargs="+", metavar="MODULE", default=None,
                        help="the modules to run, by dotted name (default: every tests/integration/test_fault*.py)")
    args = parser.parse_args()
    names = args.modules or modules()
    ensure_image()
    run = begin()
    results = [run_module(name) for name in names]
    tests = [test for result in results for test in result["tests"]]
    result: dict[str, Any] = {
        "benchmark": "faults",
        "modules_run": names,
        "every_fault_module": args.modules is None,
        "totals": totals(results),
        "passed_tests": [test["id"] for test in tests if test["outcome"] == "passed"],
        "not_passed_tests": {test["id"]: test["outcome"] for test in tests if test["outcome"] != "passed"},
        "modules": results,
        "passed": all(result["ok"] for result in results),
    }
    write_result(RESULTS, result, run)
    figures = result["totals"]
    print(f"bench/faults.py: {len(names)} modules, {figures['tests_run']} tests run, {figures['tests_passed']} "
          f"passed, {figures['failed_or_errored']} failed or errored, {figures['seconds']:.0f} s; "
          f"wrote {os.path.relpath(RESULTS, ROOT)}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
