"""
Tests for :mod:`vmservice.nodes.transitions`: every cell of the lifecycle
table through :func:`check`, and its Markdown rendering.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from vmservice.errors import Conflict
from vmservice.nodes.model import Status
from vmservice.nodes.transitions import TABLE, VISIBLE, Op, Outcome, check, markdown_table

R, P, S, U = Status.RUNNING, Status.PAUSED, Status.STOPPED, Status.SUSPENDED
GO, DONE = Outcome.GO, Outcome.DONE

#: The table as the lifecycle is specified: an Outcome, or the 409's code.
EXPECTED: dict[Op, dict[Status, Outcome | str]] = {
    Op.PAUSE: {R: GO, P: DONE, S: "not_running", U: "not_running"},
    Op.RESUME: {R: DONE, P: GO, S: "not_running", U: "not_running"},
    Op.SUSPEND: {R: GO, P: GO, S: "not_running", U: DONE},
    Op.RESTORE: {R: "no_snapshot", P: "no_snapshot", S: "no_snapshot", U: GO},
    Op.RELAUNCH: {R: "already_running", P: "already_running", S: GO, U: GO},
    Op.SHUTDOWN: {R: GO, P: "paused", S: "not_running", U: "not_running"},
    Op.REBOOT: {R: GO, P: "paused", S: "not_running", U: "not_running"},
    Op.AGENT: {R: GO, P: "paused", S: "not_running", U: "not_running"},
}

#: The words of each 409 code, finishing "node 'x' ...".
WORDS = {
    "not_running": "is not running",
    "paused": "is paused",
    "already_running": "is already running",
    "no_snapshot": "has no snapshot to restore",
}

INTERNAL = (Status.CREATING, Status.SUSPENDING, Status.RESTORING, Status.DELETING)


class CheckTests(SynchronousTestCase):
    def test_table_covers_every_op_and_visible_status(self) -> None:
        """The table has a row per operation and a cell per visible status, and no internal status."""
        self.assertEqual(set(TABLE), set(Op))
        self.assertEqual(set(VISIBLE), {R, P, S, U})
        for op, row in TABLE.items():
            self.assertEqual(set(row), set(VISIBLE), op)

    def test_every_cell(self) -> None:
        """check() answers GO, DONE or a 409 Conflict with the code and words of each cell."""
        for op, row in EXPECTED.items():
            for status, expected in row.items():
                where = f"{op.value} in {status.value}"
                if isinstance(expected, Outcome):
                    self.assertIs(check(op, "web-1", status), expected, where)
                    continue
                error = self.assertRaises(Conflict, check, op, "web-1", status)
                self.assertEqual(error.code, expected, where)
                self.assertEqual(error.status, 409, where)
                self.assertEqual(str(error), f"node 'web-1' {WORDS[expected]}", where)

    def test_internal_statuses_are_busy(self) -> None:
        """Every operation on a node in an internal status is 409 busy, naming the status."""
        for op in Op:
            for status in INTERNAL:
                error = self.assertRaises(Conflict, check, op, "web-1", status)
                self.assertEqual(error.code, "busy", (op, status))
                self.assertEqual(error.status, 409)
                self.assertIn(status.value, str(error))
                self.assertIn("'web-1'", str(error))


class MarkdownTests(SynchronousTestCase):
    def test_one_row_per_op(self) -> None:
        """A header, a separator, then one row per operation in table order with one cell per status."""
        lines = markdown_table().splitlines()
        self.assertTrue(markdown_table().endswith("\n"))
        self.assertEqual(lines[0], "| operation | Running | Paused | Stopped | Suspended |")
        self.assertEqual(lines[1], "|---|---|---|---|---|")
        rows = lines[2:]
        self.assertEqual(len(rows), len(Op))
        for op, line in zip(TABLE, rows):
            self.assertTrue(line.startswith(f"| {op.value} | "), line)
            self.assertEqual(line.count("|"), len(VISIBLE) + 2, line)

    def test_cells(self) -> None:
        """GO, DONE and 409 cells have their own wording."""
        rows = {line.split(" | ")[0][2:]: line for line in markdown_table().splitlines()[2:]}
        self.assertEqual(
            rows["pause"], "| pause | 200, goes ahead | 200, nothing to do | 409 `not_running` | 409 `not_running` |"
        )
        self.assertEqual(
            rows["relaunch"], "| relaunch | 409 `already_running` | 409 `already_running` | 200, goes ahead | 200, goes ahead |"
        )
        self.assertIn("exec, cp, fs", rows)

    def test_documentation_shows_the_table(self) -> None:
        """docs/lifecycle.md holds the rendered table."""
        path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "lifecycle.md")
        self.assertTrue(os.path.isfile(path), f"{path} is missing: it must hold the lifecycle table")
        with open(path, encoding="utf-8") as f:
            self.assertIn(markdown_table(), f.read())
