# -*- test-case-name: tests.api.test_background -*-
"""
The body of a background exec's kill: the signal and the grace before KILL.
"""

from __future__ import annotations

from twisted.web.iweb import IRequest

from ...errors import BadRequest
from ..models.background import KillRequest
from .bodies import json_object, structure


#: The signals a background exec's kill sends, by name without ``SIG``.
KILL_SIGNALS = ("TERM", "KILL", "HUP", "INT", "QUIT", "USR1", "USR2")


#: Milliseconds from a terminating signal to ``KILL`` when the kill body gives none.
DEFAULT_GRACE_MS = 5000


def kill_request(request: IRequest) -> tuple[str, int]:
    """
    The optional JSON body of a background exec's kill: ``(signal, grace_ms)``,
    ``TERM`` and 5000 by default (an empty body is the defaults).
    """
    body = structure(json_object(request), KillRequest)
    name = (body.signal or "TERM").upper()
    name = name[3:] if name.startswith("SIG") else name
    if name not in KILL_SIGNALS:
        raise BadRequest(f"field 'signal' must be one of {', '.join(KILL_SIGNALS)}, not {body.signal!r}",
                         code="invalid_body")
    grace_ms = DEFAULT_GRACE_MS if body.grace_ms is None else body.grace_ms
    if not 0 <= grace_ms <= 3_600_000:
        raise BadRequest("field 'grace_ms' must be 0 .. 3600000", code="invalid_body")
    return name, grace_ms
