# -*- test-case-name: tests.cli.test_main,tests.integration.cli.test_main -*-
"""
The commands that print event streams line by line: ``watch`` (a node's
files) and ``events`` (the nodes' lifecycle).
"""

from __future__ import annotations

import argparse

from ..client import Client
from . import output
from .arguments import duration, non_negative_int, positive_int, uint32
from .commands import Command, add_json_option, add_node_argument
from .context import Context

__all__ = ["EVENTS", "WATCH"]


async def _watch(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl watch``: print file-system events of a node, one line each, until the stream ends."""
    events = client.watch(
        options.hostname,
        options.paths,
        patterns=options.patterns or (),
        events=options.events or (),
        recursive=options.recursive,
        one_shot=options.one_shot,
        debounce=options.debounce,
        timeout=options.timeout,
        max_events=options.max_events,
        uid=options.uid,
    )
    async for event in events:
        context.out.write(output.format_watch_event(event, options.json))
        context.out.flush()
    return 0


def _watch_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl watch``."""
    add_node_argument(parser, "HOST")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="what to watch: absolute, or ~ / ~/... (the home "
                                                                 "of --uid, default root)")
    parser.add_argument("--pattern", action="append", dest="patterns", metavar="GLOB",
                        help="only entries whose base name matches this glob (repeat for more)")
    parser.add_argument("--event", action="append", dest="events", metavar="TYPE",
                        choices=("create", "write", "remove", "rename", "chmod"),
                        help="only events of this type: create, write, remove, rename, chmod (repeat for more)")
    parser.add_argument("-r", "--recursive", action="store_true", help="watch every directory below, new ones too")
    parser.add_argument("--one-shot", action="store_true", help="stop after the first event")
    parser.add_argument("--max-events", type=positive_int, metavar="N", help="stop after N events")
    parser.add_argument("--timeout", type=duration, metavar="DURATION", help="stop after this long, e.g. 30s")
    parser.add_argument("--debounce", type=duration, metavar="DURATION",
                        help="one event per type and path within this window, e.g. 200ms")
    parser.add_argument("--uid", type=uint32, metavar="N", help="whose home ~ is (daemon default root)")
    add_json_option(parser, "print each event as one line of JSON")


WATCH = Command(
    "watch", "print file-system events of a node, one line each, until the stream ends", _watch_arguments, _watch
)


async def _events(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl events``: print the nodes' lifecycle events the daemon holds, one line each; with --follow, then new
    ones as they happen (until Ctrl-C).
    """
    events = client.events(hostgroup=options.hostgroup, tag=options.tag, last_event_id=options.since,
                           follow=options.follow)
    async for event in events:
        context.out.write(output.format_node_event(event, options.json))
        context.out.flush()
    return 0


def _events_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl events``."""
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
    parser.add_argument("--hostgroup", metavar="GROUP", help="only events of this host group's nodes")
    parser.add_argument("--tag", metavar="TAG", help="only events of nodes with this tag")
    parser.add_argument("--since", type=non_negative_int, metavar="ID", default=0,
                        help="only events after this id (default: every event the daemon holds)")
    add_json_option(parser, "print each event as one line of JSON")


EVENTS = Command("events", "print the nodes' lifecycle events the daemon holds, one line each; with "
        "--follow, then new ones as they happen (until Ctrl-C)", _events_arguments, _events)
