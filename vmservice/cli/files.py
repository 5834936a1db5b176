# -*- test-case-name: tests.cli.test_main,tests.integration.cli.test_main -*-
"""
The commands of a node's files: ``cp`` (see :mod:`~vmservice.cli.copying`) and
``fs`` (``ls``, ``stat``, ``mkdir``, ``rm``).
"""

from __future__ import annotations

import argparse

from ..client import Client
from . import copying, output
from .arguments import mode, uint32
from .commands import Command, CommandGroup, add_json_option, add_node_argument
from .context import Context, Failed

__all__ = ["CP", "FS"]


async def _cp(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl cp``: copy a file or directory between here and a node (one side is HOST:PATH), placed like cp -r
    (SRC/. for a directory's contents).
    """
    try:
        await copying.copy(
            context.reactor, client, options.source, options.destination, context.err, options.uid, options.gid,
            options.exclude,
        )
    except copying.CopyFailed as error:
        raise Failed(str(error)) from None
    return 0


def _cp_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl cp``."""
    where = "a local path, HOST:PATH, or pod/[NAMESPACE/]NAME:PATH for a VM pod"
    parser.add_argument("source", metavar="SRC", help=where)
    parser.add_argument("destination", metavar="DST", help=where)
    parser.add_argument("--uid", type=uint32, metavar="N", help="owner of what is written in the node")
    parser.add_argument("--gid", type=uint32, metavar="N", help="group of what is written in the node")
    parser.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                        help="leave out entries of a directory that match (repeatable; *.log, build/**, **/cache)")


CP = Command("cp", "copy a file or directory between here and a node (one side is HOST:PATH), placed "
        "like cp -r (SRC/. for a directory's contents)", _cp_arguments, _cp)


async def _fs_ls(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl fs ls``: list a directory in a node."""
    entries = await client.readdir(options.hostname, options.path)
    context.out.write(output.format_listing(entries, options.json, output.FS_HEADERS, output.entry_rows))
    return 0


async def _fs_stat(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl fs stat``: describe a path in a node (a symlink is not followed)."""
    entry = await client.stat(options.hostname, options.path)
    context.out.write(output.format_json(entry) if options.json else output.format_entry(entry))
    return 0


async def _fs_mkdir(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl fs mkdir``: make a directory in a node."""
    await client.mkdir(options.hostname, options.path, recursive=options.parents, mode=options.mode)
    return 0


async def _fs_rm(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl fs rm``: remove a file or directory in a node."""
    await client.remove(options.hostname, options.path, recursive=options.recursive)
    return 0

def _fs_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every ``vmctl fs`` command takes first: the node and the path."""
    add_node_argument(parser, "HOST")
    parser.add_argument("path", metavar="PATH", help="absolute, or ~ / ~/... for root's home")


def _ls_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl fs ls``."""
    _fs_arguments(parser)
    add_json_option(parser)


def _mkdir_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl fs mkdir``."""
    _fs_arguments(parser)
    parser.add_argument("-p", "--parents", action="store_true", help="make parents as needed; no error if it exists")
    parser.add_argument("--mode", type=mode, metavar="MODE", help="octal mode, set exactly (daemon default 0755)")


def _rm_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl fs rm``."""
    _fs_arguments(parser)
    parser.add_argument("-r", "--recursive", action="store_true", help="remove a directory and everything in it")


FS = CommandGroup("fs", "file-system operations in a node", "File-system operations in a node.", "fs_command", (
    Command("ls", "list a directory in a node", _ls_arguments, _fs_ls),
    Command("stat", "describe a path in a node (a symlink is not followed)", _ls_arguments, _fs_stat),
    Command("mkdir", "make a directory in a node", _mkdir_arguments, _fs_mkdir),
    Command("rm", "remove a file or directory in a node", _rm_arguments, _fs_rm),
))
