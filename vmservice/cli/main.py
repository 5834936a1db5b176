# -*- test-case-name: tests.cli.test_main -*-
"""
``vmctl``: the command line of vmservice.

The work is split so that each part can be tested on its own:

- :func:`parse_args` turns argv and the environment into options (pure);
- :func:`create_body` and :func:`resolve_token` derive request data from
  them (pure, or reading one file);
- :func:`run` performs one command against a daemon through
  :class:`vmservice.client.Client` and answers the exit status, writing to
  the streams it is given, so tests run the whole tool in-process;
- :func:`main` is the console script: it runs :func:`run` under
  :func:`twisted.internet.task.react`.

Exit statuses: 0 success, 1 failure (an error answer, an unreachable daemon,
an unhealthy node, a failed image build), 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Awaitable, Callable, Mapping, Sequence, TextIO

from twisted.internet.defer import Deferred
from twisted.web.client import RequestTransmissionFailed, ResponseFailed

from ..client import DEFAULT_URL, ApiError, Client, ConnectFailed
from ..config import parse_size
from ..durations import parse_go_duration
from . import output

__all__ = ["create_body", "main", "parse_args", "resolve_token", "run"]

#: Environment variable with the daemon's address.
URL_VARIABLE = "VMSERVICE_URL"

#: Environment variable with the bearer token.
TOKEN_VARIABLE = "VMSERVICE_TOKEN"

_Command = Callable[[Client, argparse.Namespace, TextIO], Awaitable[int]]


class _Failed(Exception):
    """A command failed for a reason already worded for the user."""


# -- parsing ---------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _size(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _duration(text: str) -> str:
    """A Go duration, checked here but sent as written (the daemon parses it)."""
    try:
        seconds = parse_go_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return text


def _add_connection_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """
    The options saying which daemon to talk to.  They are accepted before and
    after the command; on commands their defaults are suppressed so that a
    value given before the command is not overwritten.
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("daemon")
    group.add_argument("--url", default=default(None), metavar="URL",
                       help=f"http(s)://host:port or a UNIX socket path (default: ${URL_VARIABLE} or {DEFAULT_URL})")
    group.add_argument("--token", default=default(None), metavar="TOKEN",
                       help=f"the bearer token (default: ${TOKEN_VARIABLE})")
    group.add_argument("--token-file", default=default(None), metavar="PATH",
                       help="read the token from this file, e.g. the daemon's <state_dir>/auth/token")


def build_parser() -> argparse.ArgumentParser:
    """The whole grammar of ``vmctl``."""
    parser = argparse.ArgumentParser(prog="vmctl", description="Manage the micro-VMs of a vmservice daemon.")
    _add_connection_options(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: _Command | None, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        _add_connection_options(sub, suppress=True)
        sub.set_defaults(handler=handler)
        return sub

    info = command("info", _info, "show the daemon's version")
    info.add_argument("--json", action="store_true", help="print the JSON answer")

    groups = command("groups", _groups, "list the host groups")
    groups.add_argument("--json", action="store_true", help="print the JSON answer")

    listing = command("list", _list, "list nodes, of all groups or of GROUP")
    listing.add_argument("group", nargs="?", metavar="GROUP", help="only the nodes of this host group")
    match = listing.add_mutually_exclusive_group()
    match.add_argument("--tag", metavar="T", help="only nodes with this exact tag")
    match.add_argument("--tag-prefix", metavar="P", help="only nodes with a tag starting with P")
    listing.add_argument("--json", action="store_true", help="print the JSON answer")

    create = command("create", _create, "create a node in GROUP and print its hostname")
    create.add_argument("group", metavar="GROUP")
    create.add_argument("--wait", choices=("agent", "userdata"),
                        help="answer only once the node is ready (agent: its guest agent answers)")
    create.add_argument("--timeout", type=_duration, metavar="DURATION",
                        help="how long --wait may take, e.g. 2m (daemon default 5m); past it the node is removed")
    create.add_argument("--tag", action="append", dest="tags", metavar="T", help="a tag (repeat for more)")
    create.add_argument("--cpus", type=_positive_int, metavar="N", help="vCPUs (at most the group's)")
    ram = create.add_mutually_exclusive_group()
    ram.add_argument("--ram-bytes", type=_positive_int, metavar="N", help="memory in bytes (at most the group's)")
    ram.add_argument("--ram", type=_size, dest="ram_bytes", metavar="SIZE", help="memory as a size: 512M, 1G")
    create.add_argument("--persistent", action="store_true", default=None, help="keep the disk when the node is deleted")
    create.add_argument("--protected", action="store_true", default=None, help="refuse to delete the node")
    create.add_argument("--json", action="store_true", help="print the JSON answer instead of the hostname")

    delete = command("delete", _delete, "delete node HOSTNAME of GROUP")
    delete.add_argument("group", metavar="GROUP")
    delete.add_argument("hostname", metavar="HOSTNAME")

    logs = command("logs", _logs, "print the tail of a node's serial console")
    logs.add_argument("hostname", metavar="HOSTNAME")
    logs.add_argument("--lines", type=_non_negative_int, metavar="N",
                      help="lines from the end (daemon default 20; 0 for all)")

    health = command("health", _health, "ask a node's guest agent; exit 0 if it answers, 1 otherwise")
    health.add_argument("hostname", metavar="HOSTNAME")
    health.add_argument("--json", action="store_true", help="print the JSON answer")

    image = commands.add_parser("image", help="guest images on this machine", description="Guest images on this machine.")
    image_commands = image.add_subparsers(dest="image_command", required=True, metavar="COMMAND")
    build = image_commands.add_parser("build", help="build a guest image unless it is up to date",
                                      description="Build a guest image unless it is up to date.")
    build.set_defaults(handler=None)
    build.add_argument("--image-dir", metavar="DIR",
                       help="where images live (default: $VMSERVICE_IMAGE_DIR or /var/cache/vmservice/images)")
    build.add_argument("--name", default="default", help="the image (recipe) name (default: default)")
    build.add_argument("--force", action="store_true", help="rebuild even if an up-to-date build exists")
    return parser


def parse_args(argv: Sequence[str], environ: Mapping[str, str]) -> argparse.Namespace:
    """
    Parse ``argv`` (without the program name), taking defaults from
    ``environ``: ``url`` is always set; ``token`` is the token given or
    found in the environment (or ``None``), unless ``token_file`` is set.

    :raise SystemExit: with status 2 on a usage error (after printing it to
        ``sys.stderr``), 0 after ``--help``.
    """
    parser = build_parser()
    options = parser.parse_args(list(argv))
    if options.token is not None and options.token_file is not None:
        parser.error("--token and --token-file cannot be used together")
    options.url = options.url or environ.get(URL_VARIABLE) or DEFAULT_URL
    if options.token is None and options.token_file is None:
        options.token = environ.get(TOKEN_VARIABLE) or None
    return options


def resolve_token(options: argparse.Namespace) -> str | None:
    """
    The bearer token to send: ``options.token``, or the first line of
    ``options.token_file``.

    :raise _Failed: the file cannot be read or is empty.
    """
    if options.token_file is None:
        token: str | None = options.token
        return token
    try:
        with open(os.path.expanduser(options.token_file)) as f:
            text = f.read().strip()
    except OSError as error:
        raise _Failed(f"cannot read the token file {options.token_file}: {error.strerror or error}") from None
    if not text:
        raise _Failed(f"the token file {options.token_file} is empty")
    return text.splitlines()[0].strip()


def create_body(options: argparse.Namespace) -> dict[str, Any]:
    """The CreateNodeRequest of ``vmctl create``: only the fields given."""
    body: dict[str, Any] = {}
    if options.tags:
        body["tags"] = list(options.tags)
    if options.cpus is not None:
        body["cpus"] = options.cpus
    if options.ram_bytes is not None:
        body["ram_bytes"] = options.ram_bytes
    if options.persistent:
        body["persistent"] = True
    if options.protected:
        body["protected"] = True
    return body


# -- commands --------------------------------------------------------------


async def _info(client: Client, options: argparse.Namespace, out: TextIO) -> int:
    info = await client.info()
    out.write(output.format_json(info) if options.json else output.format_info(info))
    return 0


async def _groups(client: Client, options: argparse.Namespace, out: TextIO) -> int:
    groups = await client.hostgroups()
    if options.json:
        out.write(output.format_json(groups))
    else:
        out.write(output.format_table(output.GROUP_HEADERS, output.group_rows(groups)))
    return 0


async def _list(client: Client, options: argparse.Namespace, out: TextIO) -> int:
    nodes = await client.nodes(options.group, tag=options.tag, tag_prefix=options.tag_prefix)
    if options.json:
        out.write(output.format_json(nodes))
    else:
        out.write(output.format_table(output.NODE_HEADERS, output.node_rows(nodes)))
    return 0


async def _create(client: Client, options: argparse.Namespace, out: TextIO) -> int:
    node = await client.create_node(options.group, create_body(options), wait=options.wait, timeout=options.timeout)
    out.write(output.format_json(node) if options.json else f"{node['hostname']}\n")
    return 0


async def _delete(client: Client, options: argparse.Namespace, out: TextIO) -> int:
    result = await client.delete_node(options.group, options.hostname)
    out.write(f"{result.get('message') or 'deleted ' + options.hostname}\n")
    if result.get("error"):
        raise _Failed(str(result["error"]))
    return 0


async def _logs(client: Client, options: argparse.Namespace, out: TextIO) -> int:
    content = (await client.logs(options.hostname, options.lines)).get("content", "")
    out.write(content if not content or content.endswith("\n") else content + "\n")
    return 0


async def _health(client: Client, options: argparse.Namespace, out: TextIO) -> int:
    try:
        health = await client.health(options.hostname)
    except ApiError as error:
        if error.status != 503:
            raise
        out.write(f"{options.hostname}: unhealthy: {error.message}\n")
        return 1
    out.write(output.format_json(health) if options.json else output.format_health(health))
    return 0


def _image_build(options: argparse.Namespace, out: TextIO) -> int:
    """Build an image on this machine (no daemon involved); the builder is imported only here."""
    from ..images.build import BuildError, build_image
    from ..images.recipe import RecipeError
    from ..images.store import ImageNotFound, default_image_dir

    def progress(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    try:
        build_image(options.image_dir or default_image_dir(), name=options.name, force=options.force, out=progress)
    except (BuildError, RecipeError, ImageNotFound) as error:
        raise _Failed(str(error)) from None
    return 0


# -- running ---------------------------------------------------------------


async def run(
    reactor: Any, argv: Sequence[str], out: TextIO, err: TextIO, environ: Mapping[str, str] | None = None
) -> int:
    """
    Run one ``vmctl`` command and answer its exit status.

    :param reactor: the reactor the client's requests run on.
    :param argv: the arguments, without the program name.
    :param out: where results go.
    :param err: where errors and usage messages go.
    :param environ: the environment (``os.environ`` when ``None``).
    """
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            options = parse_args(argv, os.environ if environ is None else environ)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 2
    try:
        if options.handler is None:
            return _image_build(options, out)
        client = Client(reactor, options.url, resolve_token(options))
        try:
            code: int = await options.handler(client, options, out)
            return code
        finally:
            await client.close()
    except ApiError as error:
        err.write(output.format_error(error) + "\n")
    except ConnectFailed as error:
        err.write(f"vmctl: {error}\n")
    except (ResponseFailed, RequestTransmissionFailed) as error:
        reasons = "; ".join(reason.getErrorMessage() for reason in error.reasons)
        err.write(f"vmctl: the connection to {options.url} failed: {reasons or 'no answer'}\n")
    except _Failed as error:
        err.write(f"vmctl: {error}\n")
    return 1


def main(argv: Sequence[str] | None = None) -> None:
    """The ``vmctl`` console script: run the command and exit with its status."""
    from twisted.internet.task import react

    arguments = sys.argv[1:] if argv is None else list(argv)

    async def _main(reactor: Any) -> None:
        code = await run(reactor, arguments, sys.stdout, sys.stderr)
        if code:
            raise SystemExit(code)

    react(lambda reactor: Deferred.fromCoroutine(_main(reactor)))


if __name__ == "__main__":
    main()
