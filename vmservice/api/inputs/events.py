# -*- test-case-name: tests.api.test_events -*-
"""
Where an event stream resumes: ``Last-Event-ID`` and its query twin.
"""

from __future__ import annotations

from twisted.web.iweb import IRequest

from ...errors import BadRequest


#: The largest ``Last-Event-ID`` (Go clients send a uint64).
MAX_EVENT_ID = 2**64 - 1


def last_event_id(request: IRequest) -> int:
    """
    The ``Last-Event-ID`` header of an event stream: a decimal uint64, 0 when
    absent or empty.

    :raise BadRequest: (``invalid_header``) anything else.
    """
    raw = request.getHeader(b"last-event-id")
    text = (raw or b"").decode("latin-1").strip()
    if not text:
        return 0
    if not text.isascii() or not text.isdigit() or int(text) > MAX_EVENT_ID:
        raise BadRequest(f"Last-Event-ID must be a decimal integer 0 .. {MAX_EVENT_ID}, not {text[:40]!r}",
                         code="invalid_header")
    return int(text)


def resume_after(request: IRequest, query_id: int | None) -> int | None:
    """
    Where an event stream that can replay resumes: after the id of the
    ``last_event_id`` query (for clients that cannot set headers), else of
    the ``Last-Event-ID`` header; ``None`` when neither is given (only new
    events).

    :raise BadRequest: (``invalid_header``) a header that is not a decimal uint64.
    """
    if query_id is not None:
        return query_id
    if not (request.getHeader(b"last-event-id") or b"").strip():
        return None
    return last_event_id(request)
