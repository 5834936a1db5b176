# -*- test-case-name: tests.cli.test_commands,tests.cli.test_main -*-
"""
``vmctl`` as a table of commands: each a :class:`Command` record (its name,
its help, the function that adds its arguments, the function that runs it),
commands with commands of their own (``fs``, ``secret``, ``image``) a
:class:`CommandGroup`; :func:`install` turns either into an argparse
subparser, the options naming the daemon (:func:`add_connection_options`)
first.  The families of commands live in modules of their own
(:mod:`~vmservice.cli.nodes`, :mod:`~vmservice.cli.lifecycle`, ...);
:mod:`~vmservice.cli.main` lists them in the order ``vmctl --help`` shows.
"""

from __future__ import annotations

import argparse
from typing import Callable

from attrs import frozen

from ..client import DEFAULT_URL
from .context import Local, Run

__all__ = [
    "Command", "CommandGroup", "TOKEN_VARIABLE", "URL_VARIABLE", "add_connection_options", "add_host_and_json", "add_json_option",
    "add_node_argument", "install",
]

#: Environment variable with the daemon's address.
URL_VARIABLE = "VMSERVICE_URL"

#: Environment variable with the bearer token.
TOKEN_VARIABLE = "VMSERVICE_TOKEN"


@frozen
class Command:
    """
    One ``vmctl`` command.

    :ivar name: the word that names it.
    :ivar help: its line in the list of commands (and its description, unless it has one of its own).
    :ivar add_arguments: adds its arguments to its parser (after the daemon's options).
    :ivar run: runs it against a daemon (``options.handler``); ``None`` for a command run here alone.
    :ivar local: runs it on this machine, without a daemon (``options.local``), when ``run`` is ``None``.
    :ivar description: the first paragraph of its ``--help``, when not ``help``.
    :ivar connection: whether it takes the daemon's options (``--url``, ``--token``, ``--token-file``).
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Run | None
    local: Local | None = None
    description: str | None = None
    connection: bool = True


@frozen
class CommandGroup:
    """
    A command whose arguments are commands of its own (``vmctl fs ls``).

    :ivar name: the word that names it.
    :ivar help: its line in the list of commands.
    :ivar description: the first paragraph of its ``--help``.
    :ivar dest: the attribute of the options its command's name goes to (``fs_command``).
    :ivar commands: its commands, in the order ``--help`` lists them.
    :ivar connection: whether it takes the daemon's options itself.
    """

    name: str
    help: str
    description: str
    dest: str
    commands: tuple[Command, ...]
    connection: bool = True


def add_connection_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """
    The options saying which daemon to talk to.  They are accepted before and
    after the command; on commands their defaults are suppressed so that a
    value given before the command is not overwritten.
    """

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("daemon")
    group.add_argument("--url", default=default(None), metavar="URL",
                       help=f"http(s)://host:port or a UNIX socket path (default: ${URL_VARIABLE} or {DEFAULT_URL})")
    group.add_argument("--token", default=default(None), metavar="TOKEN",
                       help=f"the bearer token (default: ${TOKEN_VARIABLE})")
    group.add_argument("--token-file", default=default(None), metavar="PATH",
                       help="read the token from this file, e.g. the daemon's <state_dir>/auth/token")
    group.add_argument("--kubeconfig", default=default(None), metavar="PATH",
                       help="the kubeconfig that finds a pod/NAME (default: the first file of $KUBECONFIG, "
                            "else ~/.kube/config)")


def add_json_option(parser: argparse.ArgumentParser, help: str = "print the JSON answer") -> None:
    """``--json``: print the answer as JSON (``help`` says what instead); on its own, the arguments of a command."""
    parser.add_argument("--json", action="store_true", help=help)


def add_node_argument(parser: argparse.ArgumentParser, metavar: str = "HOST", optional: bool = False,
                      help: str | None = None) -> None:
    """
    The node a command is about (``options.hostname``): a hostname, or
    ``pod/NAME`` / ``pod/NAMESPACE/NAME`` for the VM of a pod, which
    :mod:`~vmservice.cli.pods` resolves before the command runs (the command
    marks itself with ``options.node_argument``).
    """
    text = f"{help + '; ' if help else ''}a hostname, or pod/[NAMESPACE/]NAME for a VM pod"
    parser.add_argument("hostname", metavar=metavar, nargs="?" if optional else None, help=text)
    parser.set_defaults(node_argument=True)


def add_host_and_json(parser: argparse.ArgumentParser) -> None:
    """The arguments of a command about one node that can print its answer as JSON: ``HOST`` and ``--json``."""
    add_node_argument(parser)
    add_json_option(parser)


def install(commands: "argparse._SubParsersAction[argparse.ArgumentParser]", entry: Command | CommandGroup) -> None:
    """Add ``entry`` to ``commands``: its parser, the daemon's options (when it takes them), then its own."""
    if isinstance(entry, CommandGroup):
        group = commands.add_parser(entry.name, help=entry.help, description=entry.description)
        if entry.connection:
            add_connection_options(group, suppress=True)
        subcommands = group.add_subparsers(dest=entry.dest, required=True, metavar="COMMAND")
        for command in entry.commands:
            install(subcommands, command)
        return
    parser = commands.add_parser(entry.name, help=entry.help, description=entry.description or entry.help)
    if entry.connection:
        add_connection_options(parser, suppress=True)
    parser.set_defaults(handler=entry.run, local=entry.local)
    entry.add_arguments(parser)
