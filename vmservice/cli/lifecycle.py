# -*- test-case-name: tests.cli.test_main,tests.integration.cli.test_main -*-
"""
The lifecycle commands of a node: ``pause``, ``resume``, ``suspend``,
``restore``, ``fork``, ``relaunch``, ``shutdown`` and ``reboot``.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from ..client import Client
from . import output
from .arguments import duration
from .commands import Command, add_json_option, add_node_argument
from .context import Context

__all__ = ["COMMANDS"]


def _write_reply(out: TextIO, text: str) -> None:
    """Print a daemon's text reply, ending in one newline (nothing for an empty reply)."""
    text = text.rstrip("\n")
    if text:
        out.write(text + "\n")


async def _pause(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl pause``: pause a node's VM."""
    _write_reply(context.out, await client.pause(options.hostname))
    return 0


async def _resume(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl resume``: resume a paused node."""
    _write_reply(context.out, await client.resume(options.hostname))
    return 0


async def _suspend(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl suspend``: suspend a node until it is restored."""
    _write_reply(context.out, await client.suspend(options.hostname))
    return 0


async def _restore(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl restore``: restore a suspended node."""
    _write_reply(context.out, await client.restore(options.hostname, wait=options.wait, timeout=options.timeout))
    return 0


def _pause_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl pause``."""
    add_node_argument(parser, "HOST")


PAUSE = Command("pause", "pause a node's VM", _pause_arguments, _pause)


def _resume_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl resume``."""
    add_node_argument(parser, "HOST")


RESUME = Command("resume", "resume a paused node", _resume_arguments, _resume)


def _suspend_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl suspend``."""
    add_node_argument(parser, "HOST")


SUSPEND = Command("suspend", "suspend a node until it is restored", _suspend_arguments, _suspend)


def _restore_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl restore``."""
    add_node_argument(parser, "HOST")
    parser.add_argument("--wait", choices=("agent",), help="answer only once the node's guest agent answers")
    parser.add_argument("--timeout", type=duration, metavar="DURATION",
                        help="how long --wait may take, e.g. 2m")


RESTORE = Command("restore", "restore a suspended node", _restore_arguments, _restore)


async def _fork(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl fork``: fork a running node into new nodes and print their hostnames."""
    children = await client.fork(options.hostname, options.count, tags=options.tags)
    text = output.format_json(children) if options.json else "".join(f"{child['hostname']}\n" for child in children)
    context.out.write(text)
    return 0


def _fork_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl fork``."""
    add_node_argument(parser, "NODE")
    parser.add_argument("-n", "--count", type=int, default=1, help="how many new nodes (1 to 8; default 1)")
    parser.add_argument("--tag", action="append", dest="tags", metavar="T", help="a tag of the new nodes (repeat for more)")
    add_json_option(parser, "print the JSON answer instead of the hostnames")


FORK = Command("fork", "fork a running node into new nodes and print their hostnames", _fork_arguments, _fork)


async def _relaunch(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl relaunch``: start a node's VM again and print its hostname."""
    out = context.out
    node = await client.relaunch(options.hostname, wait=options.wait, timeout=options.timeout)
    out.write(output.format_json(node) if options.json else f"{node.get('hostname') or options.hostname}\n")
    return 0


def _relaunch_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl relaunch``."""
    add_node_argument(parser, "HOST")
    parser.add_argument("--wait", choices=("agent",), help="answer only once the node's guest agent answers")
    parser.add_argument("--timeout", type=duration, metavar="DURATION",
                        help="how long --wait may take, e.g. 2m")
    add_json_option(parser, "print the JSON answer instead of the hostname")


RELAUNCH = Command("relaunch", "start a node's VM again and print its hostname", _relaunch_arguments, _relaunch)


async def _shutdown(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl shutdown`` and ``vmctl reboot``: power a node's guest off."""
    _write_reply(context.out, await client.shutdown(options.hostname, options.action))
    return 0


def _shutdown_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl shutdown``."""
    add_node_argument(parser, "HOST")
    parser.set_defaults(action="shutdown")


SHUTDOWN = Command("shutdown", "power a node's guest off", _shutdown_arguments, _shutdown)


def _reboot_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl reboot``."""
    add_node_argument(parser, "HOST")
    parser.set_defaults(action="reboot")


REBOOT = Command("reboot", "restart a node's guest", _reboot_arguments, _shutdown)


#: The lifecycle commands, in the order ``vmctl --help`` lists them.
COMMANDS = (PAUSE, RESUME, SUSPEND, RESTORE, FORK, RELAUNCH, SHUTDOWN, REBOOT)
