"""
The global log captured for a test (:func:`captured_log`), read as text (:func:`logged_text`), and the
check that a secret never reached it in any form (:func:`assert_never_logged`).
"""

from __future__ import annotations

import base64
from typing import Any

from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase


def captured_log(case: SynchronousTestCase) -> list[dict[str, Any]]:
    """Every event logged from now until ``case`` ends (an observer on the global publisher)."""
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(events.append)
    case.addCleanup(globalLogPublisher.removeObserver, events.append)
    return events


def logged_text(events: list[dict[str, Any]]) -> str:
    """All the log says: each event formatted, its fields and any failure's traceback with its values."""
    parts = []
    for event in events:
        parts.append(formatEvent(event))
        parts.append(repr(event))
        failure = event.get("log_failure")
        if failure is not None:
            parts.append(failure.getTraceback(detail="verbose"))
    return "\n".join(parts)


def assert_never_logged(case: SynchronousTestCase, events: list[dict[str, Any]], content: bytes) -> None:
    """``content`` is nowhere in ``events``: not as text, bytes, base64 or hex."""
    text = logged_text(events)
    for form in (content.decode("latin-1"), repr(content), base64.b64encode(content).decode(), content.hex()):
        case.assertNotIn(form, text)
