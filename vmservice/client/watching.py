# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
Event streams (Server-Sent Events) as asynchronous iterators: a node's
file-system events (``GET /vm/{hostname}/fs/watch``) and the nodes'
lifecycle events (``GET /events``).
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any, AsyncIterator, Sequence

from .requests import Requests, _path
from .sse import events_of, sse_headers

__all__ = ["WatchCalls"]


class WatchCalls(Requests):
    """
    Event streams: a watch of a node's files, the daemon's lifecycle events.
    """

    async def watch(
        self,
        hostname: str,
        paths: Sequence[str],
        *,
        patterns: Sequence[str] = (),
        events: Sequence[str] = (),
        recursive: bool = False,
        one_shot: bool = False,
        debounce: str | None = None,
        timeout: str | None = None,
        max_events: int | None = None,
        uid: int | None = None,
        last_event_id: int | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """
        Watch paths in node ``hostname`` (``GET /vm/{hostname}/fs/watch``): an
        asynchronous iterator of events, each the decoded JSON object ``{id,
        type, path, timestamp, size, isDir, message?}``, as they happen::

            async for event in client.watch("demo-1", ["/srv"], recursive=True):
                print(event["type"], event["path"])

        The request is made when iteration starts; iteration ends when the
        daemon closes the stream (``one_shot``, ``max_events``, ``timeout``,
        or nothing left to watch).  Leaving the loop early closes the
        connection (at once with ``contextlib.aclosing``, else when the
        iterator is collected), and the daemon removes the watch.  A
        consumer slower than the events pauses the connection; the guest
        then drops events and reports an ``overflow``.

        :param paths: what to watch: absolute, ``~`` or ``~/...`` (the home of ``uid``).
        :param patterns: globs on an entry's base name (any matches).
        :param events: the types to report (``create``, ``write``, ``remove``,
            ``rename``, ``chmod``); all when empty.
        :param recursive: watch below directories too, new ones included.
        :param one_shot: end after the first event.
        :param debounce: a Go duration within which events of one type and
            path become one (``"200ms"``).
        :param timeout: a Go duration after which the stream ends.
        :param max_events: end after this many events.
        :param uid: whose home ``~`` is (the daemon's default: root).
        :param last_event_id: sent as ``Last-Event-ID``: ids continue after it.
        :raise ApiError: before the first event (400 bad input, 404 unknown
            node or missing path, 409 paused, 503 agent not connected).
        :raise WatchInterrupted: the connection was lost mid-stream.
        """
        params = {
            "paths": list(paths), "patterns": list(patterns), "events": list(events),
            "recursive": recursive or None, "one_shot": one_shot or None, "debounce": debounce,
            "timeout": timeout, "max_events": max_events, "uid": uid,
        }
        response = await self._send("GET", _path("vm", hostname, "fs", "watch"), params,
                                    headers=sse_headers(last_event_id))
        async with aclosing(events_of(response)) as stream:
            async for event in stream:
                yield event

    async def events(
        self,
        *,
        hostgroup: str | None = None,
        tag: str | None = None,
        last_event_id: int | None = None,
        follow: bool = True,
    ) -> AsyncIterator[dict[str, Any]]:
        """
        The nodes' lifecycle events (``GET /events``, an extension): an
        asynchronous iterator of the decoded JSON objects ``{id, time, type,
        hostname, hostgroup, status, tags, exit_code?}`` as they happen, and a
        ``{"type": "gap", ...}`` when a replay asked for more than the daemon
        keeps::

            async for event in client.events(hostgroup="demo"):
                print(event["id"], event["type"], event["hostname"])

        Following, the stream does not end on its own: leave the loop to
        close it (at once with ``contextlib.aclosing``).

        :param hostgroup: only events of this host group's nodes.
        :param tag: only events of nodes with this tag.
        :param last_event_id: replay what came after this id first (sent as
            ``Last-Event-ID``); ``None``: only new events.
        :param follow: ``False``: end once the replay is over.
        :raise ApiError: before the first event (400 bad input, 404 unknown host group).
        :raise WatchInterrupted: the connection was lost.
        """
        query = {"hostgroup": hostgroup, "tag": tag, "follow": None if follow else False}
        response = await self._send("GET", "/events", query, headers=sse_headers(last_event_id))
        async with aclosing(events_of(response)) as stream:
            async for event in stream:
                yield event
