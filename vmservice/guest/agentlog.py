# -*- test-case-name: tests.guest.test_agent -*-
"""
The guest agent's log: one line on stderr, which is the guest's console log.

Callers write ``agentlog.log(...)`` (the module's attribute, looked up at the
call) so that tests can silence or capture it in one place.
"""

from __future__ import annotations

import sys


def log(message: str) -> None:
    """
    One line on stderr (the guest's console log).
    """
    try:
        sys.stderr.write(f"vmservice-agent: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


__all__ = ["log"]
