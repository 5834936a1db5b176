"""
The state-machine diagrams of ``docs/state-machines/`` against the machines.

Each diagram is Graphviz: an edge's label lists the inputs that take that
transition, one a line; a line in parentheses says what happens and is not
an input.
"""

from __future__ import annotations

import os
import re
from typing import Any

#: Where the diagrams are.
DIAGRAMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "state-machines")


def drawn_transitions(name: str) -> set[tuple[str, str, str]]:
    """``(state, input, next state)`` of every edge of diagram ``name`` (``node-phase.dot``)."""
    with open(os.path.join(DIAGRAMS, name)) as f:
        text = f.read()
    drawn = set()
    for old, new, label in re.findall(r'^\s*(\w+) -> (\w+) \[label="([^"]*)"', text, re.M):
        for line in label.split("\\n"):
            if not line.startswith("("):
                drawn.add((old, line, new))
    return drawn


def machine_transitions(machine: Any) -> set[tuple[str, str, str]]:
    """``(state, input, next state)`` of every transition of a built automat machine."""
    automaton = machine.__automat_automaton__
    return {(old.name, symbol, new.name) for old, symbol, new, _ in automaton.allTransitions()}
