# -*- test-case-name: tests.cli.test_secrets,tests.integration.cli.test_main -*-
"""
``vmctl secret``: the daemon's secrets store, the content read from a file
or standard input, never from the command line.
"""

from __future__ import annotations

import argparse
import os
from typing import Callable

from ..client import Client
from ..client.secrets import MAX_SECRET_SIZE
from . import output
from .arguments import mode, uint32
from .commands import Command, CommandGroup, add_json_option
from .context import Context, Failed

__all__ = ["SECRET"]


def _secret_content(options: argparse.Namespace, context: Context) -> bytes:
    """
    A secret's content: the file ``options.file``, or standard input when it
    is ``-`` or not given.

    :raise Failed: it cannot be read, or it is larger than a secret may be.
    """
    path = options.file
    try:
        if path is None or path == "-":
            stdin = context.stdin
            if stdin is None:
                raise Failed("no standard input to read the secret from (use --file FILE)")
            if stdin.isatty():
                context.err.write("reading the secret from standard input (end with Ctrl-D)\n")
            data = stdin.read(MAX_SECRET_SIZE + 1)
        else:
            with open(os.path.expanduser(path), "rb") as stream:
                data = stream.read(MAX_SECRET_SIZE + 1)
    except OSError as error:
        raise Failed(f"cannot read {path or 'standard input'}: {error.strerror or error}") from None
    if len(data) > MAX_SECRET_SIZE:
        raise Failed(f"{path or 'standard input'} holds more than {MAX_SECRET_SIZE} bytes, the most a secret may")
    return data


async def _secret_list(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl secret list``: list the secrets (metadata only)."""
    secrets = await client.secrets()
    context.out.write(output.format_listing(secrets, options.json, output.SECRET_HEADERS, output.secret_rows))
    return 0


async def _secret_create(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl secret create``: store a new secret NAME, read from --file or standard input."""
    data = _secret_content(options, context)
    await client.create_secret(options.name, data, permissions=options.mode, uid=options.uid, gid=options.gid)
    return 0


async def _secret_update(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl secret update``: change secret NAME: its content (--file, or standard input when no other option is
    given) and/or its mode and owner; running nodes get it at once.
    """
    attributes = (options.mode, options.uid, options.gid)
    content = options.file is not None or all(value is None for value in attributes)
    data = _secret_content(options, context) if content else None
    await client.update_secret(options.name, data, permissions=options.mode, uid=options.uid, gid=options.gid)
    return 0


async def _secret_rm(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl secret rm``: delete secret NAME; running nodes that hold it lose its file."""
    await client.delete_secret(options.name)
    return 0

def _name_arguments(parser: argparse.ArgumentParser) -> None:
    """The argument of ``vmctl secret rm``: the secret's name."""
    parser.add_argument("name", metavar="NAME")


def _stored_arguments(defaults: bool) -> Callable[[argparse.ArgumentParser], None]:
    """The arguments of ``vmctl secret create`` (``defaults``: the daemon's defaults said) and ``update``."""

    def add(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name", metavar="NAME")
        parser.add_argument("--file", metavar="FILE", help="read the content from FILE ('-': standard input)")
        parser.add_argument("--mode", type=mode, metavar="MODE",
                            help="octal permissions of /run/secrets/NAME in the guest" +
                                 (" (daemon default 0600)" if defaults else ""))
        parser.add_argument("--uid", type=uint32, metavar="N", help="its owner in the guest" +
                            (" (default 0)" if defaults else ""))
        parser.add_argument("--gid", type=uint32, metavar="N", help="its group in the guest" +
                            (" (default 0)" if defaults else ""))

    return add


SECRET = CommandGroup(
    "secret", "the daemon's secrets store (content from a file or stdin)",
    "The daemon's secrets store.  Content is read from a file or from standard input, never from the command line.",
    "secret_command", (
        Command("list", "list the secrets (metadata only)", add_json_option, _secret_list),
        Command("create", "store a new secret NAME, read from --file or standard input", _stored_arguments(True),
                _secret_create),
        Command("update", "change secret NAME: its content (--file, or standard input when no other option is "
                          "given) and/or its mode and owner; running nodes get it at once", _stored_arguments(False),
                _secret_update),
        Command("rm", "delete secret NAME; running nodes that hold it lose its file", _name_arguments, _secret_rm),
    ),
)
