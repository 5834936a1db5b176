"""
Documentation that states what the code decides must say what the code does.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from vmservice.nodes.transitions import markdown_table

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


class LifecycleDocTests(SynchronousTestCase):
    def test_operation_table(self) -> None:
        """docs/lifecycle.md shows the transition table exactly as vmservice/nodes/transitions.py has it."""
        with open(os.path.join(DOCS, "lifecycle.md")) as f:
            self.assertIn(markdown_table(), f.read())
