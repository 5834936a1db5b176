# -*- test-case-name: tests.cli.test_main,tests.integration.cli.test_main -*-
"""
The commands of commands run in a node: ``exec`` (its exit status
:func:`exit_status`), ``logs`` (a node's console, or a background exec's
output), ``ps`` and ``kill``.
"""

from __future__ import annotations

import argparse
import codecs
from typing import Callable, TextIO

from ..client import Client, ExecOptions, ExecRecord
from . import output
from .arguments import env, mode, non_negative_int, size, uint32
from .commands import Command, add_host_and_json, add_node_argument
from .context import Context, Failed

__all__ = ["EXEC", "KILL", "LOGS", "PS", "exit_status"]


def _binary_writer(stream: TextIO) -> Callable[[bytes], None]:
    """
    Write bytes to ``stream`` as they come, flushed each time: to its binary
    buffer when it has one (byte-exact), else decoded as UTF-8 (in-process
    callers with a text buffer).
    """
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        stream.flush()

        def write(data: bytes) -> None:
            buffer.write(data)
            buffer.flush()

        return write
    decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write_text(data: bytes) -> None:
        stream.write(decoder.decode(data))
        stream.flush()

    return write_text


def _output_writer(
    context: Context, otherwise: Callable[[ExecRecord], None] | None = None
) -> Callable[[ExecRecord], None]:
    """
    Write a command's output as its records come, stdout to ``context.out``
    and stderr to ``context.err`` (see :func:`_binary_writer`); a record
    that is not output goes to ``otherwise``, if given.
    """
    write_out, write_err = _binary_writer(context.out), _binary_writer(context.err)

    def write(record: ExecRecord) -> None:
        if record.type == "stdout":
            write_out(record.data)
        elif record.type == "stderr":
            write_err(record.data)
        elif otherwise is not None:
            otherwise(record)

    return write


def exit_status(record: ExecRecord) -> int:
    """
    ``vmctl exec``'s exit status for the stream's last record: the command's
    exit code (128+N for signal N), kept within 0..255; an ``error`` record
    (could not start) is never 0.
    """
    code = record.exit_code if record.exit_code is not None else (1 if record.type == "error" else 0)
    if not 0 <= code <= 255:
        code = 255
    if record.type == "error" and code == 0:
        code = 1
    return code


async def _logs(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl logs``: print the tail of a node's serial console, or a background exec's output."""
    if options.exec_id is not None:
        return await _exec_logs(client, options, context)
    if options.follow or options.from_id is not None:
        raise Failed("--follow and --from-id need an EXEC_ID")
    out = context.out
    content = (await client.logs(options.hostname, options.lines)).get("content", "")
    out.write(content if not content or content.endswith("\n") else content + "\n")
    return 0


async def _exec_logs(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl logs HOST EXEC_ID``: a background exec's output, stdout here and stderr to stderr."""

    def on_other(record: ExecRecord) -> None:
        if record.type == "gap":
            context.err.write(f"vmctl: {record.message or 'output was dropped'}\n")
        elif record.type == "error":
            context.err.write(f"vmctl: {record.error}\n")

    await client.exec_logs(options.hostname, options.exec_id, on_record=_output_writer(context, on_other),
                           from_id=options.from_id, follow=options.follow)
    return 0


def _logs_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl logs``."""
    add_node_argument(parser, "HOSTNAME")
    parser.add_argument("exec_id", nargs="?", metavar="EXEC_ID",
                        help="a background exec: print its output (stdout here, stderr to stderr)")
    parser.add_argument("--lines", type=non_negative_int, metavar="N",
                        help="console: lines from the end (daemon default 20; 0 for all)")
    parser.add_argument("-f", "--follow", action="store_true", help="exec: go on until it ends")
    parser.add_argument("--from-id", type=non_negative_int, metavar="N", help="exec: the first frame (default the oldest kept)")


LOGS = Command(
    "logs", "print the tail of a node's serial console, or a background exec's output", _logs_arguments, _logs
)


async def _exec(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl exec``: run a command in a node; exit with its exit status."""
    if options.background:
        return await _exec_background(client, options, context)
    if options.ring_bytes is not None:
        raise Failed("--ring-bytes needs --background")
    if options.stdin and context.stdin is None:
        raise Failed("--stdin: there is no stdin to read")
    on_record = _output_writer(context)
    cmd, *args = options.words
    last = await client.exec(
        options.hostname, cmd, args, _exec_options(options), on_record=on_record,
        stdin=context.stdin if options.stdin else None,
    )
    if last.type == "error":
        context.err.write(f"vmctl: {last.error or 'the command could not be started'}\n")
    return exit_status(last)


async def _exec_background(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl exec --background``: start the command and print its exec id."""
    if options.stdin:
        raise Failed("--stdin cannot be used with --background")
    cmd, *args = options.words
    started = await client.exec_background(
        options.hostname, cmd, args, _exec_options(options), ring_bytes=options.ring_bytes
    )
    context.out.write(f"{started['exec_id']}\n")
    return 0


def _exec_options(options: argparse.Namespace) -> ExecOptions:
    """How ``vmctl exec`` runs its command, from its options."""
    return ExecOptions(
        env=options.env, uid=options.uid, gid=options.gid, cwd=options.cwd, shell=options.shell,
        permissions=options.umask, stdio="base64",
    )


def _exec_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl exec``."""
    add_node_argument(parser, "HOST")
    parser.add_argument("words", nargs="*", metavar="CMD [ARGS...]",
                        help="after --: the command line (for the shell) and words appended to it, each quoted")
    parser.add_argument("--stdin", action="store_true", help="stream this program's stdin to the command")
    parser.add_argument("--uid", type=uint32, metavar="N", help="run as this user id (daemon default 0)")
    parser.add_argument("--gid", type=uint32, metavar="N", help="run with this group id (daemon default 0)")
    parser.add_argument("--cwd", metavar="DIR", help="working directory (absolute, ~ or relative to the home)")
    parser.add_argument("--env", action="append", type=env, metavar="K=V", help="an environment variable (repeat)")
    parser.add_argument("--umask", type=mode, metavar="MODE", help="the process's umask, octal (e.g. 0022)")
    shell = parser.add_mutually_exclusive_group()
    shell.add_argument("--shell", metavar="SHELL", help="the shell that runs CMD (daemon default /bin/bash)")
    shell.add_argument("--no-shell", dest="shell", action="store_const", const="",
                       help="run CMD directly with ARGS as its argv")
    parser.add_argument("--background", action="store_true",
                        help="start it in the background and print its exec id (see ps, logs, kill)")
    parser.add_argument("--ring-bytes", type=size, metavar="SIZE",
                        help="background: how much output the guest keeps, e.g. 4M (daemon default 1M)")


EXEC = Command("exec", "run a command in a node; exit with its exit status", _exec_arguments, _exec)


async def _ps(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl ps``: list a node's background execs."""
    execs = await client.background_execs(options.hostname)
    context.out.write(output.format_listing(execs, options.json, output.EXEC_HEADERS, output.exec_rows))
    return 0


PS = Command("ps", "list a node's background execs", add_host_and_json, _ps)


async def _kill(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl kill``: signal a background exec (TERM, then KILL after the grace period)."""
    result = await client.kill_exec(options.hostname, options.exec_id, options.signal, options.grace_ms)
    sent = result.get("signal_sent")
    context.out.write(f"sent {sent} to {options.exec_id}\n" if sent else f"{options.exec_id} had already ended\n")
    return 0


def _kill_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl kill``."""
    add_node_argument(parser, "HOST")
    parser.add_argument("exec_id", metavar="EXEC_ID")
    parser.add_argument("--signal", choices=("TERM", "KILL", "HUP", "INT", "QUIT", "USR1", "USR2"),
                        help="the signal (daemon default TERM)")
    parser.add_argument("--grace-ms", type=non_negative_int, metavar="MS",
                        help="milliseconds before KILL follows TERM, HUP, INT or QUIT (daemon default 5000)")


KILL = Command("kill", "signal a background exec (TERM, then KILL after the grace period)", _kill_arguments, _kill)
