# -*- test-case-name: tests.e2b.test_listing -*-
"""
Listing sandboxes (pure): :func:`list_query` reads ``GET /v2/sandboxes``'s
query (``metadata``, ``state``, ``template``, ``startedAfter``, ``order``,
``limit``, ``nextToken``) strictly and bounded; :func:`page` filters, orders
(newest first unless ``order=asc``) and cuts one page, with the token of
the next when there is one (the ``X-Next-Token`` header).

``metadata`` is one parameter holding ``k=v&k2=v2`` form-encoded, each key
and value quoted once more by the SDKs; every pair must match.
``startedAfter`` is inclusive, to the microsecond.  A page token is the
last sandbox's start (microseconds since the epoch) and id, base64url: the
next page starts after it in the same order, whatever was created or
killed meanwhile.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime, timezone
from typing import Mapping, Sequence
from urllib.parse import parse_qsl, unquote

from attrs import frozen

from ..errors import BadRequest
from .sandbox import SANDBOX_ID, SandboxState, SandboxView

#: The most sandboxes of one page, and a page's size when ``limit`` names none.
MAX_LIMIT = 100
#: The most characters of a query value read.
MAX_VALUE = 8192


@frozen
class ListQuery:
    """A listing's filters and page (``None``: no such filter)."""

    metadata: tuple[tuple[str, str], ...] = ()
    states: frozenset[SandboxState] = frozenset(SandboxState)
    template: str | None = None
    started_after: datetime | None = None
    ascending: bool = False
    limit: int = MAX_LIMIT
    after: tuple[int, str] | None = None


def _micros(stamp: datetime) -> int:
    return (stamp - datetime(1970, 1, 1, tzinfo=timezone.utc)) // _MICROSECOND


_MICROSECOND = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)


def next_token(view: SandboxView) -> str:
    """The token of the page after ``view``."""
    text = f"{_micros(view.sandbox.started_at)}.{view.sandbox.sandbox_id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _token(text: str) -> tuple[int, str]:
    try:
        decoded = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
        micros, _, sandbox_id = decoded.partition(".")
        if SANDBOX_ID.fullmatch(sandbox_id) and micros.isdigit() and len(micros) <= 20:
            return int(micros), sandbox_id
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise BadRequest("nextToken is not a token this daemon gave")


def _one(args: Mapping[bytes, Sequence[bytes]], name: str) -> str | None:
    values = args.get(name.encode(), [])
    if not values:
        return None
    if len(values) > 1 and name != "state":
        raise BadRequest(f"{name} is given more than once")
    if any(len(value) > MAX_VALUE for value in values):
        raise BadRequest(f"{name} is over {MAX_VALUE} characters")
    try:
        return ",".join(value.decode("utf-8") for value in values)
    except UnicodeDecodeError:
        raise BadRequest(f"{name} is not UTF-8") from None


def _metadata(text: str) -> tuple[tuple[str, str], ...]:
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=True, max_num_fields=64)
    except ValueError:
        raise BadRequest("metadata must be key=value pairs joined by & (at most 64)") from None
    return tuple((unquote(key), unquote(value)) for key, value in pairs)


def _states(text: str) -> frozenset[SandboxState]:
    try:
        return frozenset(SandboxState(word) for word in text.split(","))
    except ValueError:
        raise BadRequest("state must be running, paused or both (comma-separated)") from None


def _time(text: str) -> datetime:
    try:
        stamp = datetime.fromisoformat(text.replace(" ", "+"))
    except ValueError:
        raise BadRequest("startedAfter must be an RFC 3339 time") from None
    return stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise BadRequest(f"limit must be from 1 to {MAX_LIMIT}")
    return int(text)


def list_query(args: Mapping[bytes, Sequence[bytes]]) -> ListQuery:
    """The listing ``args`` (a request's parsed query) ask for; other parameters are ignored."""
    metadata, state, template = _one(args, "metadata"), _one(args, "state"), _one(args, "template")
    started, order, limit, token = (_one(args, "startedAfter"), _one(args, "order"), _one(args, "limit"),
                                    _one(args, "nextToken"))
    if order not in (None, "asc", "desc"):
        raise BadRequest("order must be asc or desc")
    return ListQuery(
        metadata=_metadata(metadata) if metadata else (),
        states=_states(state) if state else frozenset(SandboxState),
        template=template or None,
        started_after=_time(started) if started else None,
        ascending=order == "asc",
        limit=_limit(limit) if limit is not None else MAX_LIMIT,
        after=_token(token) if token else None,
    )


def _matches(view: SandboxView, query: ListQuery) -> bool:
    sandbox = view.sandbox
    metadata = dict(sandbox.metadata)
    return (view.state in query.states
            and (query.template is None or sandbox.template_id == query.template)
            and (query.started_after is None or sandbox.started_at >= query.started_after)
            and all(metadata.get(key) == value for key, value in query.metadata))


def page(views: Sequence[SandboxView], query: ListQuery) -> tuple[list[SandboxView], str | None]:
    """One page of ``views`` as ``query`` asks, and the next page's token (``None``: this is the last)."""
    def key(view: SandboxView) -> tuple[int, str]:
        return _micros(view.sandbox.started_at), view.sandbox.sandbox_id

    ordered = sorted((view for view in views if _matches(view, query)), key=key, reverse=not query.ascending)
    if query.after is not None:
        after = query.after
        ordered = [view for view in ordered if (key(view) > after if query.ascending else key(view) < after)]
    shown = ordered[:query.limit]
    return shown, next_token(shown[-1]) if len(ordered) > query.limit else None


__all__ = ["ListQuery", "MAX_LIMIT", "list_query", "next_token", "page"]
