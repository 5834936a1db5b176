# -*- test-case-name: tests.cli.test_main,tests.integration.cli.test_main -*-
"""
``vmctl``: the command line of vmservice.

The work is split so that each part can be tested on its own:

- :data:`COMMANDS` is the table of commands (:class:`~vmservice.cli.commands.Command`
  records, by family in modules of their own), :func:`build_parser` the
  grammar made of it;
- :func:`parse_args` turns argv and the environment into options (pure);
- :func:`resolve_token` reads the token (from the options, or one file);
- :func:`run` performs one command against a daemon through
  :class:`vmservice.client.Client` and answers the exit status, writing to
  the streams it is given, so tests run the whole tool in-process;
- :func:`main` is the console script: it runs :func:`run` under
  :func:`twisted.internet.task.react`.

Exit statuses: 0 success, 1 failure (an error answer, an unreachable daemon,
an unhealthy node, a failed image build, a watch whose stream was cut), 2
usage error; ``vmctl exec`` exits with the command's status (128+N for signal
N), 255 when the stream was cut; ``vmctl watch`` exits 0 when the daemon ends
the stream (``--one-shot``, ``--max-events``, ``--timeout``, nothing left to
watch).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import IO, Mapping, Sequence, TextIO

from twisted.internet.defer import Deferred
from twisted.web.client import RequestGenerationFailed, RequestTransmissionFailed, ResponseFailed

from ..client import DEFAULT_URL, ApiError, Client, ConnectFailed, ExecInterrupted, WatchInterrupted
from . import copying, events, execs, files, forwarding, images, lifecycle, nodes, output, pods, secrets, stats
from . import tagging, terminal
from .commands import TOKEN_VARIABLE, URL_VARIABLE, Command, CommandGroup, add_connection_options, install
from .context import Context, Failed, IVmctlReactor

__all__ = ["COMMANDS", "IVmctlReactor", "build_parser", "main", "parse_args", "resolve_token", "run"]

#: Every command of ``vmctl``, in the order ``vmctl --help`` lists them.
COMMANDS: tuple[Command | CommandGroup, ...] = (
    nodes.INFO, nodes.GROUPS, nodes.LIST, nodes.CREATE, nodes.DELETE, nodes.DESCRIBE, tagging.TAG, execs.LOGS,
    stats.STATS, stats.TOP, nodes.HEALTH, *lifecycle.COMMANDS, execs.EXEC, execs.PS, execs.KILL, files.CP,
    terminal.SHELL, events.WATCH, events.EVENTS, forwarding.FORWARD, files.FS, secrets.SECRET, images.IMAGE,
)


def build_parser() -> argparse.ArgumentParser:
    """The whole grammar of ``vmctl``: the daemon's options, then :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(prog="vmctl", description="Manage the micro-VMs of a vmservice daemon.")
    add_connection_options(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for entry in COMMANDS:
        install(commands, entry)
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
    argv, edits = tagging.take_tag_edits(list(argv))
    # Everything after the first ``--`` of ``exec`` is the command, taken
    # verbatim (argparse would drop a later ``--`` among the words).
    words: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        head = parser.parse_known_args(argv[:split])[0] if "exec" in argv[:split] else None
        if head is not None and head.command == "exec":
            argv, words = argv[:split], argv[split + 1:]
    options = parser.parse_args(argv)
    if options.token is not None and options.token_file is not None:
        parser.error("--token and --token-file cannot be used together")
    if options.command == "exec":
        options.words = list(options.words) + words
        if not options.words:
            parser.error("exec: the command is missing (vmctl exec HOST [options] -- CMD [ARGS...])")
    if options.command == "tag":
        try:
            options.edits = tagging.tag_words(edits or [])
        except ValueError as error:
            parser.error(f"tag: {error} (a tag starting with - goes after --: vmctl tag HOST -- -TAG)")
    if options.command == "cp":
        options.source = copying.parse_location(options.source)
        options.destination = copying.parse_location(options.destination)
        if (options.source.host is None) == (options.destination.host is None):
            parser.error("cp: exactly one of SRC and DST must be HOST:PATH")
    try:
        pods.check_pod_references(options, url_given=options.url is not None)
    except ValueError as error:
        parser.error(str(error))
    options.url = options.url or environ.get(URL_VARIABLE) or DEFAULT_URL
    if options.token is None and options.token_file is None:
        options.token = environ.get(TOKEN_VARIABLE) or None
    return options


def resolve_token(options: argparse.Namespace) -> str | None:
    """
    The bearer token to send: ``options.token``, or the first token of
    ``options.token_file`` (the first word of its first line that is neither
    blank nor a ``#`` comment: the daemon's token file, whose lines are
    ``TOKEN [LABEL]``, or a file holding one token).

    :raise Failed: the file cannot be read or holds no token.
    """
    if options.token_file is None:
        token: str | None = options.token
        return token
    try:
        with open(os.path.expanduser(options.token_file)) as f:
            text = f.read(1 << 16)
    except OSError as error:
        raise Failed(f"cannot read the token file {options.token_file}: {error.strerror or error}") from None
    for line in text.splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            return words[0]
    raise Failed(f"the token file {options.token_file} holds no token")


def _local(options: argparse.Namespace, out: TextIO) -> int | None:
    """The exit status of a command run on this machine alone, or ``None`` for one against a daemon."""
    return options.local(options, out) if options.local is not None else None


async def run(
    reactor: IVmctlReactor,
    argv: Sequence[str],
    out: TextIO,
    err: TextIO,
    environ: Mapping[str, str] | None = None,
    stdin: IO[bytes] | None = None,
) -> int:
    """
    Run one ``vmctl`` command and answer its exit status.

    :param reactor: the reactor the client's requests run on (see
        :class:`IVmctlReactor`; ``vmctl image build`` needs none).
    :param argv: the arguments, without the program name.
    :param out: where results go (``vmctl exec`` writes the command's stdout
        to its ``buffer`` when it has one).
    :param err: where errors, usage messages and progress go.
    :param environ: the environment (``os.environ`` when ``None``).
    :param stdin: what ``vmctl exec --stdin`` sends (a pipe or terminal is
        read as data arrives); ``None`` when there is none.
    """
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            options = parse_args(argv, os.environ if environ is None else environ)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 2
    try:
        local = _local(options, out)
        if local is not None:
            return local
        await pods.resolve_pod_references(reactor, options, os.environ if environ is None else environ)
        client = Client(reactor, options.url, resolve_token(options))
        try:
            code: int = await options.handler(client, options, Context(reactor, out, err, stdin))
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
    except RequestGenerationFailed as error:
        reasons = "; ".join(reason.getErrorMessage() for reason in error.reasons)
        err.write(f"vmctl: the request body could not be sent: {reasons}\n")
    except Failed as error:
        err.write(f"vmctl: {error}\n")
    except ExecInterrupted as error:
        err.write(f"vmctl: {error}\n")
        return 255
    except WatchInterrupted as error:
        err.write(f"vmctl: {error}\n")
    except BrokenPipeError:
        return 141  # our stdout was closed (``| head``): quietly, like any command killed by SIGPIPE
    return 1


def main(argv: Sequence[str] | None = None) -> None:
    """The ``vmctl`` console script: run the command and exit with its status."""
    from twisted.internet.task import react

    arguments = sys.argv[1:] if argv is None else list(argv)

    async def _main(reactor: IVmctlReactor) -> None:
        code = await run(reactor, arguments, sys.stdout, sys.stderr, stdin=sys.stdin.buffer)
        if code:
            raise SystemExit(code)

    react(lambda reactor: Deferred.fromCoroutine(_main(reactor)))


if __name__ == "__main__":
    main()
