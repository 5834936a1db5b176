# -*- test-case-name: tests.cli.test_terminal,tests.integration.test_shell -*-
"""
``vmctl shell NODE``: the local terminal joined to a shell in the node.

When stdin is a terminal it is put in raw mode (:func:`tty.setraw`) for the
session and restored on every way out (``finally``); the remote terminal
gets the local size at start and again on every ``SIGWINCH``; a HEARTBEAT
goes out every :data:`HEARTBEAT_INTERVAL` seconds.  Keys are sent as they
are typed; the remote output is written to stdout as it comes.  The exit
status is 0 when the remote shell ended (SESSION_CLOSE, close 1000), 1 when
the session could not be opened or was lost.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import termios
import tty
from typing import IO, Optional, TextIO

from twisted.internet.task import LoopingCall

from ..client import Client, FdReader, ShellError, ShellSession
from .arguments import uint32
from .commands import Command, add_node_argument
from .context import Context, IVmctlReactor

#: Seconds between HEARTBEATs (what existing clients send).
HEARTBEAT_INTERVAL = 30.0


def terminal_size(fd: int) -> tuple[int, int]:
    """``(cols, rows)`` of the terminal ``fd``, or 80 x 24 when it is none."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 80, 24
    return size.columns or 80, size.lines or 24


async def pump(reactor: IVmctlReactor, session: ShellSession, stdin_fd: int, stdout_fd: int) -> int:
    """
    Join ``session`` to the descriptors until the remote shell ends.

    :return: 0 when it ended (SESSION_CLOSE or close 1000), 1 when it was lost.
    """
    keys = FdReader(reactor, stdin_fd, session.write, lambda reason: session.close())
    blocking = os.get_blocking(stdin_fd)
    os.set_blocking(stdin_fd, False)
    beat = LoopingCall(session.heartbeat)
    beat.clock = reactor
    previous = None
    if os.isatty(stdout_fd) or os.isatty(stdin_fd):
        def resized(number: int, frame: object) -> None:
            reactor.callFromThread(lambda: session.resize(*terminal_size(stdout_fd if os.isatty(stdout_fd) else stdin_fd)))

        previous = signal.signal(signal.SIGWINCH, resized)
    try:
        session.resize(*terminal_size(stdout_fd if os.isatty(stdout_fd) else stdin_fd))
        keys.startReading()  # type: ignore[no-untyped-call]
        beat.start(HEARTBEAT_INTERVAL, now=False)
        while (chunk := await session.read()) is not None:
            view = memoryview(chunk)
            while view:
                try:
                    written = os.write(stdout_fd, view)
                except BlockingIOError:
                    # A terminal shares its file description between stdin
                    # and stdout, so stdout is non-blocking too: wait for room.
                    select.select([], [stdout_fd], [])
                    continue
                view = view[written:]
    finally:
        if beat.running:
            beat.stop()
        keys.stopReading()  # type: ignore[no-untyped-call]
        os.set_blocking(stdin_fd, blocking)
        if previous is not None:
            signal.signal(signal.SIGWINCH, previous)
    return 0 if session.session_closed or session.close_code == 1000 else 1


async def shell_command(client: Client, options: argparse.Namespace, reactor: IVmctlReactor, out: TextIO, err: TextIO,
                        stdin: Optional[IO[bytes]]) -> int:
    """``vmctl shell``: open the session, raw mode while it runs, the exit status."""
    stdin_fd = stdin.fileno() if stdin is not None else 0
    stdout_fd = out.fileno()
    saved = termios.tcgetattr(stdin_fd) if os.isatty(stdin_fd) else None
    try:
        session = await client.shell(options.hostname, uid=options.uid, gid=options.gid, shell=options.shell,
                                     cwd=options.cwd)
    except ShellError as error:
        err.write(f"vmctl: {error}" + (f" (HTTP {error.status})" if error.status else "") + "\n")
        return 1
    try:
        if saved is not None:
            tty.setraw(stdin_fd)
        out.flush()
        code = await pump(reactor, session, stdin_fd, stdout_fd)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin_fd, termios.TCSAFLUSH, saved)
        session.abort()
    if code:
        err.write(f"vmctl: the shell was lost ({session.close_reason or session.close_code})\n")
    return code


async def _shell(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl shell``: an interactive shell in a node, on this terminal (exits 0 when it ends)."""
    return await shell_command(client, options, context.reactor, context.out, context.err, context.stdin)


def _shell_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl shell``."""
    add_node_argument(parser, "HOST")
    parser.add_argument("--uid", type=uint32, metavar="UID", help="user id (default 0, root)")
    parser.add_argument("--gid", type=uint32, metavar="GID", help="group id (default 0)")
    parser.add_argument("--cwd", metavar="DIR", help="working directory (default: the user's home)")
    parser.add_argument("--shell", metavar="PATH", help="the shell, run as a login shell (default /bin/bash)")


SHELL = Command(
    "shell", "an interactive shell in a node, on this terminal (exits 0 when it ends)", _shell_arguments, _shell
)

__all__ = ["HEARTBEAT_INTERVAL", "SHELL", "pump", "shell_command", "terminal_size"]
