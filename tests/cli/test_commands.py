# -*- test-case-name: tests.cli.test_commands -*-
"""
Tests for :mod:`vmservice.cli.commands` and the table of commands
(:data:`vmservice.cli.main.COMMANDS`): each record becomes a subparser with
the daemon's options first, and ``vmctl --help`` lists the table in order.
"""

from __future__ import annotations

import argparse
import io
import sys

from twisted.trial.unittest import SynchronousTestCase

from vmservice.cli.commands import Command, CommandGroup, install
from vmservice.cli.main import COMMANDS, build_parser


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subparsers of ``parser`` by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _run(client: object, options: argparse.Namespace, context: object) -> int:
    raise AssertionError("not run here")


class TableTests(SynchronousTestCase):
    def test_names_unique_and_in_order(self) -> None:
        """The parser's commands are the table's, each once, in the table's order (the order of --help)."""
        names = [entry.name for entry in COMMANDS]
        self.assertEqual(len(names), len(set(names)))
        self.assertEqual(list(_choices(build_parser())), names)

    def test_groups(self) -> None:
        """A group's commands become its subparsers, in order; its own name is stored where it says."""
        parser = build_parser()
        for entry in COMMANDS:
            if isinstance(entry, CommandGroup):
                self.assertEqual(list(_choices(_choices(parser)[entry.name])), [c.name for c in entry.commands])

    def test_every_command_runs_somewhere(self) -> None:
        """Every command runs against a daemon or here alone, never both and never neither."""
        commands = [c for entry in COMMANDS for c in (entry.commands if isinstance(entry, CommandGroup) else (entry,))]
        self.assertGreater(len(commands), 35)
        for command in commands:
            self.assertTrue((command.run is None) != (command.local is None), command.name)


class InstallTests(SynchronousTestCase):
    def test_command(self) -> None:
        """A command's parser takes the daemon's options first, then its own; its run is the options' handler."""
        parser = argparse.ArgumentParser(prog="t")
        install(parser.add_subparsers(dest="command"),
                Command("go", "go somewhere", lambda sub: sub.add_argument("where"), _run))
        options = parser.parse_args(["go", "--url", "http://h:1", "home"])
        self.assertEqual((options.where, options.url, options.handler, options.local),
                         ("home", "http://h:1", _run, None))
        sub = _choices(parser)["go"]
        self.assertEqual(sub.description, "go somewhere")
        self.assertEqual(" ".join(sub.format_usage().split()),
                         "usage: t go [-h] [--url URL] [--token TOKEN] [--token-file PATH] [--kubeconfig PATH] where")

    def test_local_command(self) -> None:
        """A command run here alone has no daemon options, no handler, and its own description."""
        parser = argparse.ArgumentParser(prog="t")

        def local(options: argparse.Namespace, out: object) -> int:
            return 0

        install(parser.add_subparsers(dest="command"),
                Command("make", "make it", lambda sub: None, None, local, description="Make it.", connection=False))
        options = parser.parse_args(["make"])
        self.assertEqual((options.handler, options.local), (None, local))
        self.assertEqual(_choices(parser)["make"].description, "Make it.")
        self.patch(sys, "stderr", io.StringIO())
        self.assertRaises(SystemExit, parser.parse_args, ["make", "--url", "x"])
        self.assertIn("unrecognized arguments: --url x", sys.stderr.getvalue())
