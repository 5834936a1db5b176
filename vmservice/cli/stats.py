# -*- test-case-name: tests.cli.test_main,tests.integration.cli.test_main -*-
"""
The commands of the guests' statistics: ``stats`` (once) and ``top`` (refreshed
until ``q``).
"""

from __future__ import annotations

import argparse
import atexit
import os
import select
import termios
import tty

from twisted.internet.task import deferLater

from ..client import Client
from . import output
from .arguments import positive_float, positive_int
from .commands import Command, add_json_option, add_node_argument
from .context import Context

__all__ = ["STATS", "TOP"]


async def _stats(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl stats``: show the statistics of every node's guest, or of NODE."""
    stats = [await client.node_stats(options.hostname)] if options.hostname else await client.stats()
    if options.json:
        context.out.write(output.format_json(stats[0] if options.hostname else stats))
    else:
        context.out.write(output.format_table(output.STATS_HEADERS, output.stats_rows(stats)))
    return 0


def _stats_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl stats``."""
    add_node_argument(parser, "NODE", optional=True, help="only this node")
    add_json_option(parser)


STATS = Command("stats", "show the statistics of every node's guest, or of NODE", _stats_arguments, _stats)


def _quit_pressed(fd: int) -> bool:
    """Whether ``q`` was typed on the terminal ``fd`` (in cbreak mode), reading what is there."""
    while select.select([fd], [], [], 0)[0]:
        typed = os.read(fd, 64)
        if not typed or b"q" in typed.lower():
            return True
    return False


async def _top(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl top``: show the nodes' statistics, busiest first, refreshed every few seconds (q quits)."""
    out = context.out
    keys = context.stdin.fileno() if context.stdin is not None and context.stdin.isatty() else None
    saved = termios.tcgetattr(keys) if keys is not None else None

    def restore() -> None:
        if keys is not None and saved is not None:
            termios.tcsetattr(keys, termios.TCSADRAIN, saved)

    if keys is not None:
        tty.setcbreak(keys)
        atexit.register(restore)  # Ctrl-C stops the reactor without resuming this coroutine
    try:
        shown = 0
        while True:
            stats = output.by_load(await client.stats())
            if out.isatty():
                out.write("\x1b[H\x1b[2J")
            answered = sum(1 for stat in stats if isinstance(stat.get("snapshot"), dict))
            out.write(f"vmctl top: {len(stats)} nodes, {answered} answered, every {options.interval:g} s"
                      f"{' (q to quit)' if keys is not None else ''}\n")
            out.write(output.format_table(output.STATS_HEADERS, output.stats_rows(stats)))
            out.flush()
            shown += 1
            if options.iterations is not None and shown >= options.iterations:
                return 0
            waited = 0.0
            while waited < options.interval:
                step = min(0.1, options.interval - waited)
                await deferLater(context.reactor, step, lambda: None)
                waited += step
                if keys is not None and _quit_pressed(keys):
                    return 0
    finally:
        restore()
        atexit.unregister(restore)


def _top_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl top``."""
    parser.add_argument("--interval", type=positive_float, default=2.0, metavar="SECONDS",
                        help="seconds between two refreshes (default 2)")
    parser.add_argument("--iterations", "-n", type=positive_int, metavar="N", help="stop after N refreshes")
    parser.add_argument("--once", dest="iterations", action="store_const", const=1, help="show one refresh and stop")


TOP = Command(
    "top", "show the nodes' statistics, busiest first, refreshed every few seconds (q quits)", _top_arguments, _top
)
