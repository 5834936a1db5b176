# -*- test-case-name: tests.cli.test_main,tests.integration.cli.test_main -*-
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
an unhealthy node, a failed image build, a watch whose stream was cut), 2
usage error; ``vmctl exec`` exits with the command's status (128+N for signal
N), 255 when the stream was cut; ``vmctl watch`` exits 0 when the daemon ends
the stream (``--one-shot``, ``--max-events``, ``--timeout``, nothing left to
watch).
"""

from __future__ import annotations

import argparse
import atexit
import codecs
import contextlib
import os
import select
import sys
import termios
import tty
from typing import IO, Any, Awaitable, Callable, Mapping, Sequence, TextIO

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError
from twisted.internet.task import deferLater
from twisted.web.client import RequestGenerationFailed, RequestTransmissionFailed, ResponseFailed

from ..client import (
    DEFAULT_URL,
    ApiError,
    Client,
    ConnectFailed,
    ExecInterrupted,
    ExecOptions,
    ExecRecord,
    IClientReactor,
    WatchInterrupted,
)
from ..config import parse_size
from ..durations import parse_go_duration
from . import copying, forwarding, output

__all__ = [
    "IVmctlReactor",
    "TagWords",
    "create_body",
    "exit_status",
    "main",
    "parse_args",
    "resolve_token",
    "run",
    "tag_words",
]

#: Environment variable with the daemon's address.
URL_VARIABLE = "VMSERVICE_URL"

#: Environment variable with the bearer token.
TOKEN_VARIABLE = "VMSERVICE_TOKEN"

_Command = Callable[[Client, argparse.Namespace, "_Context"], Awaitable[int]]


class _Failed(Exception):
    """A command failed for a reason already worded for the user."""


class IVmctlReactor(IClientReactor, copying.ICopyReactor):
    """
    What ``vmctl`` needs of its reactor: the client's (see
    :class:`~vmservice.client.IClientReactor`) and ``vmctl cp``'s (see
    :class:`~vmservice.cli.copying.ICopyReactor`).

    Every reactor Twisted installs provides all of these; this interface only
    names them together for the type checker (no reactor declares it).
    """


@frozen
class _Context:
    """
    What a command runs with besides its options.

    :ivar reactor: the reactor (for clocks, pipes and threads).
    :ivar out: where results go.
    :ivar err: where errors and progress go.
    :ivar stdin: the bytes ``vmctl exec --stdin`` sends, or ``None``.
    """

    reactor: IVmctlReactor
    out: TextIO
    err: TextIO
    stdin: IO[bytes] | None


# -- parsing ---------------------------------------------------------------


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _whole(text: str, low: int, high: int | None, bounds: str) -> int:
    """A decimal integer from ``low`` to ``high`` (no upper bound: ``None``); ``bounds`` says them."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"{bounds}: {text!r}")
    return value


def _positive_int(text: str) -> int:
    return _whole(text, 1, None, "must be positive")


def _non_negative_int(text: str) -> int:
    return _whole(text, 0, None, "must not be negative")


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


def _uint32(text: str) -> int:
    return _whole(text, 0, 0xFFFFFFFF, "must be 0 to 4294967295")


def _mode(text: str) -> str:
    """An octal permission mode (``0755``, ``755``), sent as four octal digits."""
    try:
        value = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an octal mode: {text!r}") from None
    if not 0 <= value <= 0o7777:
        raise argparse.ArgumentTypeError(f"not a permission mode: {text!r}")
    return f"{value:04o}"


def _env(text: str) -> str:
    name, equals, _ = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return text


@frozen
class TagWords:
    """
    What the words of ``vmctl tag`` ask for: nothing (show the tags), or one
    change, sent as one request.

    :ivar add: the tags of ``+TAG`` words.
    :ivar remove: the tags of ``-TAG`` words.
    :ivar replace: the tags of ``=TAG`` words (none for a lone ``=``), or
        ``None`` when there is no ``=`` word.
    """

    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    replace: tuple[str, ...] | None = None

    @property
    def changes(self) -> bool:
        """Whether the words ask for a change (otherwise the tags are shown)."""
        return bool(self.add or self.remove) or self.replace is not None


def tag_words(words: Sequence[str]) -> TagWords:
    """
    Read the edits of ``vmctl tag``: ``+TAG`` adds, ``-TAG`` removes,
    ``=TAG`` (repeated) replaces all tags with those given, a lone ``=``
    clears them.  Tags themselves are checked by the daemon.

    :raise ValueError: a word that is not an edit, an empty tag, or ``=``
        words with ``+``/``-`` words.
    """
    add: list[str] = []
    remove: list[str] = []
    replace: list[str] | None = None
    for word in words:
        sign, tag = word[:1], word[1:]
        if sign == "=":
            replace = (replace or []) + ([tag] if tag else [])
        elif sign in ("+", "-") and tag:
            (add if sign == "+" else remove).append(tag)
        elif sign in ("+", "-"):
            raise ValueError(f"{word!r}: the tag is missing")
        else:
            raise ValueError(f"{word!r} is not +TAG, -TAG or =TAG")
    if replace is not None and (add or remove):
        raise ValueError("=TAG (replace) cannot be combined with +TAG or -TAG")
    return TagWords(tuple(add), tuple(remove), tuple(replace) if replace is not None else None)


#: Options that take a value, before or after any command.
_VALUE_OPTIONS = ("--url", "--token", "--token-file")
#: Options of ``vmctl tag`` that take none.
_TAG_FLAGS = ("-h", "--help", "--json")


def _command_at(argv: Sequence[str]) -> int | None:
    """Where the command is in ``argv`` (after the options before it), or ``None``."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if word in _VALUE_OPTIONS:
            index += 2
        elif word.startswith("-"):
            if word.split("=", 1)[0] not in _VALUE_OPTIONS:
                return None  # -h, or a usage error argparse will word
            index += 1
        else:
            return index
    return None


def _take_tag_edits(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """
    Take the edits out of a ``vmctl tag`` command line before argparse
    reads it (it would take ``-b`` for an option): after the command, every
    word that starts with ``+``, ``-`` or ``=`` and is not one of the
    command's options, and every word after ``--``.

    :return: the rest of ``argv`` and the edits, or ``argv`` and ``None``
        for another command.
    """
    at = _command_at(argv)
    if at is None or argv[at] != "tag":
        return argv, None
    rest = argv[: at + 1]
    edits: list[str] = []
    words = iter(argv[at + 1:])
    for word in words:
        if word == "--":
            edits.extend(words)
        elif word in _TAG_FLAGS or word.split("=", 1)[0] in _VALUE_OPTIONS:
            rest.append(word)
            value = next(words, None) if word in _VALUE_OPTIONS else None
            if value is not None:
                rest.append(value)
        elif word[:1] in ("+", "-", "="):
            edits.append(word)
        else:
            rest.append(word)
    return rest, edits


def _add_connection_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
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
                        help="answer only once the node is ready (agent: its guest agent answers and its secrets "
                             "and login are in place; userdata: its userdata is over too)")
    create.add_argument("--timeout", type=_duration, metavar="DURATION",
                        help="how long --wait may take, e.g. 2m (daemon default 5m); past it the node is removed")
    create.add_argument("--tag", action="append", dest="tags", metavar="T", help="a tag (repeat for more)")
    create.add_argument("--cpus", type=_positive_int, metavar="N", help="vCPUs (at most the group's)")
    ram = create.add_mutually_exclusive_group()
    ram.add_argument("--ram-bytes", type=_positive_int, metavar="N", help="memory in bytes (at most the group's)")
    ram.add_argument("--ram", type=_size, dest="ram_bytes", metavar="SIZE", help="memory as a size: 512M, 1G")
    create.add_argument("--persistent", action="store_true", default=None, help="keep the disk when the node is deleted")
    create.add_argument("--protected", action="store_true", default=None, help="refuse to delete the node")
    create.add_argument("--hostname", metavar="NAME", help="the node's hostname instead of GROUP-N")
    create.add_argument("--userdata", metavar="FILE",
                        help="a shell script run once as root at the first boot ('-' reads standard input)")
    create.add_argument("--secret", action="append", dest="secrets", metavar="NAME",
                        help="a stored secret placed in /run/secrets/NAME (repeat for more)")
    create.add_argument("--ssh-key", action="append", dest="ssh_key_files", metavar="FILE",
                        help="a file of OpenSSH public keys (e.g. ~/.ssh/id_ed25519.pub) for the login user")
    create.add_argument("--import-user", metavar="USER", help="the login user (default root when keys are given)")
    create.add_argument("--codehost-user", metavar="USER", help="take the login user's keys from this code-host user")
    create.add_argument("--image", dest="disk_image", metavar="IMAGE",
                        help="make the node from this built image (vmctl image list) instead of the group's")
    create.add_argument("--gpus", type=_positive_int, dest="gpu_count", metavar="N",
                        help="pass N of the group's GPUs through to the node")
    create.add_argument("--pci-device", action="append", dest="pci_devices", metavar="ADDRESS",
                        help="pass the host's PCI device ADDRESS (0000:01:00.0) through to the node (repeat for more)")
    create.add_argument("--json", action="store_true", help="print the JSON answer instead of the hostname")

    delete = command("delete", _delete, "delete node HOSTNAME of GROUP")
    delete.add_argument("group", metavar="GROUP")
    delete.add_argument("hostname", metavar="HOSTNAME")

    describe = command("describe", _describe, "describe a node: its resources, storage, image, network and state")
    describe.add_argument("hostname", metavar="HOST")
    describe.add_argument("--json", action="store_true", help="print the JSON answer")

    tag = command("tag", _tag, "show or change a node's tags: +TAG adds, -TAG removes, =TAG... replaces all")
    tag.add_argument("hostname", metavar="HOST")
    tag.add_argument("--json", action="store_true", help="print the JSON answer")

    logs = command("logs", _logs, "print the tail of a node's serial console, or a background exec's output")
    logs.add_argument("hostname", metavar="HOSTNAME")
    logs.add_argument("exec_id", nargs="?", metavar="EXEC_ID",
                      help="a background exec: print its output (stdout here, stderr to stderr)")
    logs.add_argument("--lines", type=_non_negative_int, metavar="N",
                      help="console: lines from the end (daemon default 20; 0 for all)")
    logs.add_argument("-f", "--follow", action="store_true", help="exec: go on until it ends")
    logs.add_argument("--from-id", type=_non_negative_int, metavar="N", help="exec: the first frame (default the oldest kept)")

    stats = command("stats", _stats, "show the statistics of every node's guest, or of NODE")
    stats.add_argument("hostname", nargs="?", metavar="NODE", help="only this node")
    stats.add_argument("--json", action="store_true", help="print the JSON answer")

    top = command("top", _top, "show the nodes' statistics, busiest first, refreshed every few seconds (q quits)")
    top.add_argument("--interval", type=_positive_float, default=2.0, metavar="SECONDS",
                     help="seconds between two refreshes (default 2)")
    top.add_argument("--iterations", "-n", type=_positive_int, metavar="N", help="stop after N refreshes")
    top.add_argument("--once", dest="iterations", action="store_const", const=1, help="show one refresh and stop")

    health = command("health", _health, "ask a node's guest agent; exit 0 if it answers, 1 otherwise")
    health.add_argument("hostname", metavar="HOSTNAME")
    health.add_argument("--json", action="store_true", help="print the JSON answer")

    pause = command("pause", _pause, "pause a node's VM")
    pause.add_argument("hostname", metavar="HOST")

    resume = command("resume", _resume, "resume a paused node")
    resume.add_argument("hostname", metavar="HOST")

    suspend = command("suspend", _suspend, "suspend a node until it is restored")
    suspend.add_argument("hostname", metavar="HOST")

    restore = command("restore", _restore, "restore a suspended node")
    restore.add_argument("hostname", metavar="HOST")
    restore.add_argument("--wait", choices=("agent",), help="answer only once the node's guest agent answers")
    restore.add_argument("--timeout", type=_duration, metavar="DURATION",
                         help="how long --wait may take, e.g. 2m")

    fork = command("fork", _fork, "fork a running node into new nodes and print their hostnames")
    fork.add_argument("hostname", metavar="NODE")
    fork.add_argument("-n", "--count", type=int, default=1, help="how many new nodes (1 to 8; default 1)")
    fork.add_argument("--tag", action="append", dest="tags", metavar="T", help="a tag of the new nodes (repeat for more)")
    fork.add_argument("--json", action="store_true", help="print the JSON answer instead of the hostnames")

    relaunch = command("relaunch", _relaunch, "start a node's VM again and print its hostname")
    relaunch.add_argument("hostname", metavar="HOST")
    relaunch.add_argument("--wait", choices=("agent",), help="answer only once the node's guest agent answers")
    relaunch.add_argument("--timeout", type=_duration, metavar="DURATION",
                          help="how long --wait may take, e.g. 2m")
    relaunch.add_argument("--json", action="store_true", help="print the JSON answer instead of the hostname")

    shutdown = command("shutdown", _shutdown, "power a node's guest off")
    shutdown.add_argument("hostname", metavar="HOST")
    shutdown.set_defaults(action="shutdown")

    reboot = command("reboot", _shutdown, "restart a node's guest")
    reboot.add_argument("hostname", metavar="HOST")
    reboot.set_defaults(action="reboot")

    execute = command("exec", _exec, "run a command in a node; exit with its exit status")
    execute.add_argument("hostname", metavar="HOST")
    execute.add_argument("words", nargs="*", metavar="CMD [ARGS...]",
                         help="after --: the command line (for the shell) and words appended to it, each quoted")
    execute.add_argument("--stdin", action="store_true", help="stream this program's stdin to the command")
    execute.add_argument("--uid", type=_uint32, metavar="N", help="run as this user id (daemon default 0)")
    execute.add_argument("--gid", type=_uint32, metavar="N", help="run with this group id (daemon default 0)")
    execute.add_argument("--cwd", metavar="DIR", help="working directory (absolute, ~ or relative to the home)")
    execute.add_argument("--env", action="append", type=_env, metavar="K=V", help="an environment variable (repeat)")
    execute.add_argument("--umask", type=_mode, metavar="MODE", help="the process's umask, octal (e.g. 0022)")
    shell = execute.add_mutually_exclusive_group()
    shell.add_argument("--shell", metavar="SHELL", help="the shell that runs CMD (daemon default /bin/bash)")
    shell.add_argument("--no-shell", dest="shell", action="store_const", const="",
                       help="run CMD directly with ARGS as its argv")
    execute.add_argument("--background", action="store_true",
                         help="start it in the background and print its exec id (see ps, logs, kill)")
    execute.add_argument("--ring-bytes", type=_size, metavar="SIZE",
                         help="background: how much output the guest keeps, e.g. 4M (daemon default 1M)")

    ps = command("ps", _ps, "list a node's background execs")
    ps.add_argument("hostname", metavar="HOST")
    ps.add_argument("--json", action="store_true", help="print the JSON answer")

    kill = command("kill", _kill, "signal a background exec (TERM, then KILL after the grace period)")
    kill.add_argument("hostname", metavar="HOST")
    kill.add_argument("exec_id", metavar="EXEC_ID")
    kill.add_argument("--signal", choices=("TERM", "KILL", "HUP", "INT", "QUIT", "USR1", "USR2"),
                      help="the signal (daemon default TERM)")
    kill.add_argument("--grace-ms", type=_non_negative_int, metavar="MS",
                      help="milliseconds before KILL follows TERM, HUP, INT or QUIT (daemon default 5000)")

    cp = command("cp", _cp, "copy a file or directory between here and a node (one side is HOST:PATH), placed "
                             "like cp -r (SRC/. for a directory's contents)")
    cp.add_argument("source", metavar="SRC")
    cp.add_argument("destination", metavar="DST")
    cp.add_argument("--uid", type=_uint32, metavar="N", help="owner of what is written in the node")
    cp.add_argument("--gid", type=_uint32, metavar="N", help="group of what is written in the node")
    cp.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                    help="leave out entries of a directory that match (repeatable; *.log, build/**, **/cache)")

    shell_cmd = command("shell", _shell, "an interactive shell in a node, on this terminal (exits 0 when it ends)")
    shell_cmd.add_argument("hostname", metavar="HOST")
    shell_cmd.add_argument("--uid", type=_uint32, metavar="UID", help="user id (default 0, root)")
    shell_cmd.add_argument("--gid", type=_uint32, metavar="GID", help="group id (default 0)")
    shell_cmd.add_argument("--cwd", metavar="DIR", help="working directory (default: the user's home)")
    shell_cmd.add_argument("--shell", metavar="PATH", help="the shell, run as a login shell (default /bin/bash)")

    watch = command("watch", _watch, "print file-system events of a node, one line each, until the stream ends")
    watch.add_argument("hostname", metavar="HOST")
    watch.add_argument("paths", nargs="+", metavar="PATH", help="what to watch: absolute, or ~ / ~/... (the home "
                                                                "of --uid, default root)")
    watch.add_argument("--pattern", action="append", dest="patterns", metavar="GLOB",
                       help="only entries whose base name matches this glob (repeat for more)")
    watch.add_argument("--event", action="append", dest="events", metavar="TYPE",
                       choices=("create", "write", "remove", "rename", "chmod"),
                       help="only events of this type: create, write, remove, rename, chmod (repeat for more)")
    watch.add_argument("-r", "--recursive", action="store_true", help="watch every directory below, new ones too")
    watch.add_argument("--one-shot", action="store_true", help="stop after the first event")
    watch.add_argument("--max-events", type=_positive_int, metavar="N", help="stop after N events")
    watch.add_argument("--timeout", type=_duration, metavar="DURATION", help="stop after this long, e.g. 30s")
    watch.add_argument("--debounce", type=_duration, metavar="DURATION",
                       help="one event per type and path within this window, e.g. 200ms")
    watch.add_argument("--uid", type=_uint32, metavar="N", help="whose home ~ is (daemon default root)")
    watch.add_argument("--json", action="store_true", help="print each event as one line of JSON")

    events = command("events", _events, "print the nodes' lifecycle events the daemon holds, one line each; with "
                                        "--follow, then new ones as they happen (until Ctrl-C)")
    events.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
    events.add_argument("--hostgroup", metavar="GROUP", help="only events of this host group's nodes")
    events.add_argument("--tag", metavar="TAG", help="only events of nodes with this tag")
    events.add_argument("--since", type=_non_negative_int, metavar="ID", default=0,
                        help="only events after this id (default: every event the daemon holds)")
    events.add_argument("--json", action="store_true", help="print each event as one line of JSON")

    forward = command("forward", _forward, "forward local ports or UNIX sockets to ports or UNIX sockets in a node, "
                                           "through the daemon (until Ctrl-C)")
    forward.add_argument("hostname", metavar="NODE")
    forward.add_argument("specs", nargs="+", metavar="SPEC",
                         help="[LOCAL_ADDR:]LOCAL_PORT:REMOTE_HOST:REMOTE_PORT, unix:/path on either side "
                              "(LOCAL_ADDR defaults to 127.0.0.1; LOCAL_PORT 0 picks a free port)")

    fs = commands.add_parser("fs", help="file-system operations in a node",
                             description="File-system operations in a node.")
    _add_connection_options(fs, suppress=True)
    fs_commands = fs.add_subparsers(dest="fs_command", required=True, metavar="COMMAND")

    def fs_command(name: str, handler: _Command, help: str) -> argparse.ArgumentParser:
        sub = fs_commands.add_parser(name, help=help, description=help)
        _add_connection_options(sub, suppress=True)
        sub.set_defaults(handler=handler)
        sub.add_argument("hostname", metavar="HOST")
        sub.add_argument("path", metavar="PATH", help="absolute, or ~ / ~/... for root's home")
        return sub

    ls = fs_command("ls", _fs_ls, "list a directory in a node")
    ls.add_argument("--json", action="store_true", help="print the JSON answer")
    fs_stat = fs_command("stat", _fs_stat, "describe a path in a node (a symlink is not followed)")
    fs_stat.add_argument("--json", action="store_true", help="print the JSON answer")
    mkdir = fs_command("mkdir", _fs_mkdir, "make a directory in a node")
    mkdir.add_argument("-p", "--parents", action="store_true", help="make parents as needed; no error if it exists")
    mkdir.add_argument("--mode", type=_mode, metavar="MODE", help="octal mode, set exactly (daemon default 0755)")
    rm = fs_command("rm", _fs_rm, "remove a file or directory in a node")
    rm.add_argument("-r", "--recursive", action="store_true", help="remove a directory and everything in it")

    secret = commands.add_parser("secret", help="the daemon's secrets store (content from a file or stdin)",
                                 description="The daemon's secrets store.  Content is read from a file or from "
                                             "standard input, never from the command line.")
    _add_connection_options(secret, suppress=True)
    secret_commands = secret.add_subparsers(dest="secret_command", required=True, metavar="COMMAND")

    def secret_command(name: str, handler: _Command, help: str) -> argparse.ArgumentParser:
        sub = secret_commands.add_parser(name, help=help, description=help)
        _add_connection_options(sub, suppress=True)
        sub.set_defaults(handler=handler)
        return sub

    secret_list = secret_command("list", _secret_list, "list the secrets (metadata only)")
    secret_list.add_argument("--json", action="store_true", help="print the JSON answer")
    for name, handler, help in (
        ("create", _secret_create, "store a new secret NAME, read from --file or standard input"),
        ("update", _secret_update, "change secret NAME: its content (--file, or standard input when no other "
                                   "option is given) and/or its mode and owner; running nodes get it at once"),
    ):
        sub = secret_command(name, handler, help)
        sub.add_argument("name", metavar="NAME")
        sub.add_argument("--file", metavar="FILE", help="read the content from FILE ('-': standard input)")
        sub.add_argument("--mode", type=_mode, metavar="MODE",
                         help="octal permissions of /run/secrets/NAME in the guest" +
                              (" (daemon default 0600)" if name == "create" else ""))
        sub.add_argument("--uid", type=_uint32, metavar="N", help="its owner in the guest" +
                         (" (default 0)" if name == "create" else ""))
        sub.add_argument("--gid", type=_uint32, metavar="N", help="its group in the guest" +
                         (" (default 0)" if name == "create" else ""))
    secret_rm = secret_command("rm", _secret_rm, "delete secret NAME; running nodes that hold it lose its file")
    secret_rm.add_argument("name", metavar="NAME")

    image = commands.add_parser("image", help="guest images on this machine", description="Guest images on this machine.")
    image_commands = image.add_subparsers(dest="image_command", required=True, metavar="COMMAND")
    build = image_commands.add_parser("build", help="build a guest image unless it is up to date",
                                      description="Build a guest image unless it is up to date.")
    build.set_defaults(handler=None)
    build.add_argument("name", nargs="?", metavar="NAME",
                       help="the image (recipe) name: a file vmservice/images/recipes/NAME.toml (default: default)")
    build.add_argument("--image-dir", metavar="DIR",
                       help="where images live (default: $VMSERVICE_IMAGE_DIR or /var/cache/vmservice/images)")
    build.add_argument("--name", dest="name_option", metavar="NAME", help="the same as NAME")
    build.add_argument("--force", action="store_true", help="rebuild even if an up-to-date build exists")
    image_list = image_commands.add_parser("list", help="list the images the daemon can make nodes from",
                                           description="List the images the daemon can make nodes from.")
    _add_connection_options(image_list, suppress=True)
    image_list.set_defaults(handler=_image_list)
    image_list.add_argument("--json", action="store_true", help="print the JSON answer")
    imported = image_commands.add_parser(
        "import", help="make a guest image of an OCI image layout or a docker save tar file",
        description="Make a guest image of a container image (an OCI image layout directory, or a tar file of one or "
                    "of docker save), on this machine: its layers, our init and agent, and a runtime of our own.")
    imported.set_defaults(handler=None)
    imported.add_argument("--image-dir", metavar="DIR",
                          help="where images live (default: $VMSERVICE_IMAGE_DIR or /var/cache/vmservice/images)")
    imported.add_argument("--ref", default="", help="the image to take when FILE holds several (ref name or tag)")
    imported.add_argument("--force", action="store_true", help="import again even if up to date")
    imported.add_argument("image_name", metavar="NAME", help="the name of the new image")
    imported.add_argument("file", metavar="FILE", help="an OCI image layout directory, or a tar file")
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
    argv, edits = _take_tag_edits(list(argv))
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
            options.edits = tag_words(edits or [])
        except ValueError as error:
            parser.error(f"tag: {error} (a tag starting with - goes after --: vmctl tag HOST -- -TAG)")
    if options.command == "cp":
        options.source = copying.parse_location(options.source)
        options.destination = copying.parse_location(options.destination)
        if (options.source.host is None) == (options.destination.host is None):
            parser.error("cp: exactly one of SRC and DST must be HOST:PATH")
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

    :raise _Failed: the file cannot be read or holds no token.
    """
    if options.token_file is None:
        token: str | None = options.token
        return token
    try:
        with open(os.path.expanduser(options.token_file)) as f:
            text = f.read(1 << 16)
    except OSError as error:
        raise _Failed(f"cannot read the token file {options.token_file}: {error.strerror or error}") from None
    for line in text.splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            return words[0]
    raise _Failed(f"the token file {options.token_file} holds no token")


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
    if options.hostname:
        body["hostname"] = options.hostname
    if options.userdata:
        body["userdata"] = _read_text(options.userdata)
    if options.secrets:
        body["secrets"] = list(options.secrets)
    if options.ssh_key_files:
        body["ssh_keys"] = [line.strip() for path in options.ssh_key_files for line in _read_text(path).splitlines()
                            if line.strip() and not line.startswith("#")]
    if options.import_user:
        body["import_user"] = options.import_user
    if options.codehost_user:
        body["codehost_user"] = options.codehost_user
    if options.disk_image:
        body["disk_image"] = options.disk_image
    if options.gpu_count:
        body["gpu_count"] = options.gpu_count
    if options.pci_devices:
        body["pci_devices"] = list(options.pci_devices)
    return body


def _read_text(path: str) -> str:
    """The text of file ``path`` (``-``: standard input); :class:`_Failed` when it cannot be read."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(os.path.expanduser(path), encoding="utf-8") as stream:
            return stream.read()
    except (OSError, UnicodeDecodeError) as error:
        raise _Failed(f"cannot read {path}: {error}") from None


# -- commands --------------------------------------------------------------


async def _info(client: Client, options: argparse.Namespace, context: _Context) -> int:
    out = context.out
    info = await client.info()
    out.write(output.format_json(info) if options.json else output.format_info(info))
    return 0


async def _groups(client: Client, options: argparse.Namespace, context: _Context) -> int:
    out = context.out
    groups = await client.hostgroups()
    out.write(output.format_json(groups) if options.json
              else output.format_table(output.GROUP_HEADERS, output.group_rows(groups)))
    return 0


async def _list(client: Client, options: argparse.Namespace, context: _Context) -> int:
    out = context.out
    nodes = await client.nodes(options.group, tag=options.tag, tag_prefix=options.tag_prefix)
    out.write(output.format_json(nodes) if options.json
              else output.format_table(output.NODE_HEADERS, output.node_rows(nodes)))
    return 0


async def _create(client: Client, options: argparse.Namespace, context: _Context) -> int:
    out = context.out
    node = await client.create_node(options.group, create_body(options), wait=options.wait, timeout=options.timeout)
    out.write(output.format_json(node) if options.json else f"{node['hostname']}\n")
    return 0


async def _delete(client: Client, options: argparse.Namespace, context: _Context) -> int:
    out = context.out
    result = await client.delete_node(options.group, options.hostname)
    out.write(f"{result.get('message') or 'deleted ' + options.hostname}\n")
    if result.get("error"):
        raise _Failed(str(result["error"]))
    return 0


async def _describe(client: Client, options: argparse.Namespace, context: _Context) -> int:
    description = await client.describe(options.hostname)
    context.out.write(output.format_json(description) if options.json else output.format_description(description))
    return 0


async def _tag(client: Client, options: argparse.Namespace, context: _Context) -> int:
    edits: TagWords = options.edits
    if edits.changes:
        tags = await client.set_tags(options.hostname, add=edits.add or None, remove=edits.remove or None,
                                     replace=edits.replace)
    else:
        tags = await client.tags(options.hostname)
    if options.json:
        context.out.write(output.format_json({"hostname": options.hostname, "tags": tags}))
    else:
        context.out.write("".join(f"{tag}\n" for tag in tags))
    return 0


async def _logs(client: Client, options: argparse.Namespace, context: _Context) -> int:
    if options.exec_id is not None:
        return await _exec_logs(client, options, context)
    if options.follow or options.from_id is not None:
        raise _Failed("--follow and --from-id need an EXEC_ID")
    out = context.out
    content = (await client.logs(options.hostname, options.lines)).get("content", "")
    out.write(content if not content or content.endswith("\n") else content + "\n")
    return 0


async def _exec_logs(client: Client, options: argparse.Namespace, context: _Context) -> int:
    write_out, write_err = _binary_writer(context.out), _binary_writer(context.err)

    def on_record(record: ExecRecord) -> None:
        if record.type == "stdout":
            write_out(record.data)
        elif record.type == "stderr":
            write_err(record.data)
        elif record.type == "gap":
            context.err.write(f"vmctl: {record.message or 'output was dropped'}\n")
        elif record.type == "error":
            context.err.write(f"vmctl: {record.error}\n")

    await client.exec_logs(options.hostname, options.exec_id, on_record=on_record, from_id=options.from_id,
                           follow=options.follow)
    return 0


async def _ps(client: Client, options: argparse.Namespace, context: _Context) -> int:
    execs = await client.background_execs(options.hostname)
    context.out.write(output.format_json(execs) if options.json
                      else output.format_table(output.EXEC_HEADERS, output.exec_rows(execs)))
    return 0


async def _kill(client: Client, options: argparse.Namespace, context: _Context) -> int:
    result = await client.kill_exec(options.hostname, options.exec_id, options.signal, options.grace_ms)
    sent = result.get("signal_sent")
    context.out.write(f"sent {sent} to {options.exec_id}\n" if sent else f"{options.exec_id} had already ended\n")
    return 0


async def _stats(client: Client, options: argparse.Namespace, context: _Context) -> int:
    stats = [await client.node_stats(options.hostname)] if options.hostname else await client.stats()
    if options.json:
        context.out.write(output.format_json(stats[0] if options.hostname else stats))
    else:
        context.out.write(output.format_table(output.STATS_HEADERS, output.stats_rows(stats)))
    return 0


def _quit_pressed(fd: int) -> bool:
    """Whether ``q`` was typed on the terminal ``fd`` (in cbreak mode), reading what is there."""
    while select.select([fd], [], [], 0)[0]:
        typed = os.read(fd, 64)
        if not typed or b"q" in typed.lower():
            return True
    return False


async def _top(client: Client, options: argparse.Namespace, context: _Context) -> int:
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


async def _health(client: Client, options: argparse.Namespace, context: _Context) -> int:
    out = context.out
    try:
        health = await client.health(options.hostname)
    except ApiError as error:
        # 503: the agent should answer but does not; 409: the node has none
        # (paused, stopped, suspended).  Anything else is an ordinary error.
        if error.status not in (409, 503):
            raise
        out.write(f"{options.hostname}: unhealthy: {error.message}\n")
        return 1
    out.write(output.format_json(health) if options.json else output.format_health(health))
    return 0


def _write_reply(out: TextIO, text: str) -> None:
    """Print a daemon's text reply, ending in one newline (nothing for an empty reply)."""
    text = text.rstrip("\n")
    if text:
        out.write(text + "\n")


async def _pause(client: Client, options: argparse.Namespace, context: _Context) -> int:
    _write_reply(context.out, await client.pause(options.hostname))
    return 0


async def _resume(client: Client, options: argparse.Namespace, context: _Context) -> int:
    _write_reply(context.out, await client.resume(options.hostname))
    return 0


async def _suspend(client: Client, options: argparse.Namespace, context: _Context) -> int:
    _write_reply(context.out, await client.suspend(options.hostname))
    return 0


async def _restore(client: Client, options: argparse.Namespace, context: _Context) -> int:
    _write_reply(context.out, await client.restore(options.hostname, wait=options.wait, timeout=options.timeout))
    return 0


async def _relaunch(client: Client, options: argparse.Namespace, context: _Context) -> int:
    out = context.out
    node = await client.relaunch(options.hostname, wait=options.wait, timeout=options.timeout)
    out.write(output.format_json(node) if options.json else f"{node.get('hostname') or options.hostname}\n")
    return 0


async def _fork(client: Client, options: argparse.Namespace, context: _Context) -> int:
    children = await client.fork(options.hostname, options.count, tags=options.tags)
    text = output.format_json(children) if options.json else "".join(f"{child['hostname']}\n" for child in children)
    context.out.write(text)
    return 0


async def _shutdown(client: Client, options: argparse.Namespace, context: _Context) -> int:
    _write_reply(context.out, await client.shutdown(options.hostname, options.action))
    return 0


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


async def _exec(client: Client, options: argparse.Namespace, context: _Context) -> int:
    if options.background:
        return await _exec_background(client, options, context)
    if options.ring_bytes is not None:
        raise _Failed("--ring-bytes needs --background")
    if options.stdin and context.stdin is None:
        raise _Failed("--stdin: there is no stdin to read")
    write_out, write_err = _binary_writer(context.out), _binary_writer(context.err)

    def on_record(record: ExecRecord) -> None:
        if record.type == "stdout":
            write_out(record.data)
        elif record.type == "stderr":
            write_err(record.data)

    cmd, *args = options.words
    last = await client.exec(
        options.hostname, cmd, args, _exec_options(options), on_record=on_record,
        stdin=context.stdin if options.stdin else None,
    )
    if last.type == "error":
        context.err.write(f"vmctl: {last.error or 'the command could not be started'}\n")
    return exit_status(last)


async def _exec_background(client: Client, options: argparse.Namespace, context: _Context) -> int:
    if options.stdin:
        raise _Failed("--stdin cannot be used with --background")
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


async def _cp(client: Client, options: argparse.Namespace, context: _Context) -> int:
    try:
        await copying.copy(
            context.reactor, client, options.source, options.destination, context.err, options.uid, options.gid,
            options.exclude,
        )
    except copying.CopyFailed as error:
        raise _Failed(str(error)) from None
    return 0


async def _watch(client: Client, options: argparse.Namespace, context: _Context) -> int:
    events = client.watch(
        options.hostname,
        options.paths,
        patterns=options.patterns or (),
        events=options.events or (),
        recursive=options.recursive,
        one_shot=options.one_shot,
        debounce=options.debounce,
        timeout=options.timeout,
        max_events=options.max_events,
        uid=options.uid,
    )
    async for event in events:
        context.out.write(output.format_watch_event(event, options.json))
        context.out.flush()
    return 0


async def _events(client: Client, options: argparse.Namespace, context: _Context) -> int:
    events = client.events(hostgroup=options.hostgroup, tag=options.tag, last_event_id=options.since,
                           follow=options.follow)
    async for event in events:
        context.out.write(output.format_node_event(event, options.json))
        context.out.flush()
    return 0


async def _forward(client: Client, options: argparse.Namespace, context: _Context) -> int:
    try:
        specs = [forwarding.parse_spec(text) for text in options.specs]
    except ValueError as error:
        raise _Failed(str(error)) from None
    ports = []
    try:
        for spec in specs:
            try:
                endpoint = client.tunnel_endpoint(options.hostname, spec.remote.describe())
            except ValueError as error:
                raise _Failed(str(error)) from None
            proxy = forwarding.ForwardProxy(endpoint, spec, context.err)
            try:
                port = forwarding.listen(context.reactor, proxy)
            except CannotListenError as error:
                raise _Failed(f"cannot listen on {spec.describe_local()}: {error.socketError}") from None
            ports.append(port)
            context.out.write(f"forwarding {forwarding.listening_on(port, spec)} -> {options.hostname} "
                              f"{spec.remote.describe()}\n")
        context.out.flush()
        stopped: Deferred[None] = Deferred()
        core: Any = context.reactor
        core.addSystemEventTrigger("before", "shutdown", stopped.callback, None)  # Ctrl-C stops the reactor
        await stopped
    finally:
        for port in ports:
            port.stopListening()
    context.err.write("forwarding stopped\n")
    return 0


async def _shell(client: Client, options: argparse.Namespace, context: _Context) -> int:
    from .terminal import shell_command

    return await shell_command(client, options, context.reactor, context.out, context.err, context.stdin)


async def _fs_ls(client: Client, options: argparse.Namespace, context: _Context) -> int:
    entries = await client.readdir(options.hostname, options.path)
    context.out.write(output.format_json(entries) if options.json
                      else output.format_table(output.FS_HEADERS, output.entry_rows(entries)))
    return 0


async def _fs_stat(client: Client, options: argparse.Namespace, context: _Context) -> int:
    entry = await client.stat(options.hostname, options.path)
    context.out.write(output.format_json(entry) if options.json else output.format_entry(entry))
    return 0


async def _fs_mkdir(client: Client, options: argparse.Namespace, context: _Context) -> int:
    await client.mkdir(options.hostname, options.path, recursive=options.parents, mode=options.mode)
    return 0


async def _fs_rm(client: Client, options: argparse.Namespace, context: _Context) -> int:
    await client.remove(options.hostname, options.path, recursive=options.recursive)
    return 0


async def _image_list(client: Client, options: argparse.Namespace, context: _Context) -> int:
    out = context.out
    images = await client.images()
    out.write(output.format_json(images) if options.json
              else output.format_table(output.IMAGE_HEADERS, output.image_rows(images)))
    return 0


def _secret_content(options: argparse.Namespace, context: _Context) -> bytes:
    """
    A secret's content: the file ``options.file``, or standard input when it
    is ``-`` or not given.

    :raise _Failed: it cannot be read, or it is larger than a secret may be.
    """
    from ..secretstore import MAX_SECRET_SIZE

    path = options.file
    try:
        if path is None or path == "-":
            stdin = context.stdin
            if stdin is None:
                raise _Failed("no standard input to read the secret from (use --file FILE)")
            if stdin.isatty():
                context.err.write("reading the secret from standard input (end with Ctrl-D)\n")
            data = stdin.read(MAX_SECRET_SIZE + 1)
        else:
            with open(os.path.expanduser(path), "rb") as stream:
                data = stream.read(MAX_SECRET_SIZE + 1)
    except OSError as error:
        raise _Failed(f"cannot read {path or 'standard input'}: {error.strerror or error}") from None
    if len(data) > MAX_SECRET_SIZE:
        raise _Failed(f"{path or 'standard input'} holds more than {MAX_SECRET_SIZE} bytes, the most a secret may")
    return data


async def _secret_list(client: Client, options: argparse.Namespace, context: _Context) -> int:
    secrets = await client.secrets()
    context.out.write(output.format_json(secrets) if options.json
                      else output.format_table(output.SECRET_HEADERS, output.secret_rows(secrets)))
    return 0


async def _secret_create(client: Client, options: argparse.Namespace, context: _Context) -> int:
    data = _secret_content(options, context)
    await client.create_secret(options.name, data, permissions=options.mode, uid=options.uid, gid=options.gid)
    return 0


async def _secret_update(client: Client, options: argparse.Namespace, context: _Context) -> int:
    attributes = (options.mode, options.uid, options.gid)
    content = options.file is not None or all(value is None for value in attributes)
    data = _secret_content(options, context) if content else None
    await client.update_secret(options.name, data, permissions=options.mode, uid=options.uid, gid=options.gid)
    return 0


async def _secret_rm(client: Client, options: argparse.Namespace, context: _Context) -> int:
    await client.delete_secret(options.name)
    return 0


def _image_build(options: argparse.Namespace, out: TextIO) -> int:
    """Build an image on this machine (no daemon involved); the builder is imported only here."""
    from ..images.build import BuildError, build_image
    from ..images.recipe import RecipeError
    from ..images.store import ImageNotFound, default_image_dir

    def progress(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    if options.name and options.name_option and options.name != options.name_option:
        raise _Failed(f"two image names given: {options.name} and {options.name_option}")
    name = options.name or options.name_option or "default"
    try:
        build_image(options.image_dir or default_image_dir(), name=name, force=options.force, out=progress)
    except (BuildError, RecipeError, ImageNotFound) as error:
        raise _Failed(str(error)) from None
    return 0


def _image_import(options: argparse.Namespace, out: TextIO) -> int:
    """Import a container image on this machine (no daemon involved): ``python -m vmservice.images import``."""
    from ..images.imported import ImportFailed, import_image
    from ..images.store import ImageNotFound, default_image_dir

    def progress(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    try:
        import_image(options.image_dir or default_image_dir(), options.image_name, options.file, ref=options.ref,
                     force=options.force, out=progress)
    except (ImportFailed, ImageNotFound) as error:
        raise _Failed(str(error)) from None
    return 0


# -- running ---------------------------------------------------------------


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
        if options.handler is None:
            return _image_import(options, out) if options.image_command == "import" else _image_build(options, out)
        client = Client(reactor, options.url, resolve_token(options))
        try:
            code: int = await options.handler(client, options, _Context(reactor, out, err, stdin))
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
    except _Failed as error:
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
