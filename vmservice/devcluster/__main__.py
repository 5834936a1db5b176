# -*- test-case-name: tests.devcluster.test_main -*-
"""
``python -m vmservice.devcluster``: build, start, stop and query a development control plane.

Usage::

    python -m vmservice.devcluster build [--cache-dir DIR]
    python -m vmservice.devcluster start --dir DIR [--nodes NAME,NAME,...] [--ports auto|BASE] [--cache-dir DIR]
    python -m vmservice.devcluster stop --dir DIR [--purge]
    python -m vmservice.devcluster status --dir DIR

``start`` prints ``export KUBECONFIG=DIR/admin.kubeconfig`` as its last line. ``--cache-dir`` defaults to
``$VMSERVICE_CONTROLPLANE_DIR`` or ``/var/cache/vmservice/controlplane``; ``--ports`` to ``auto``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence, TypeVar

from vmservice.devcluster.build import DEFAULT_CACHE_DIR, BuildFailed, build_entry
from vmservice.devcluster.control import start, status, stop
from vmservice.devcluster.ports import DEFAULT_NODES, parse_nodes, parse_ports
from vmservice.devcluster.recipe import RecipeError
from vmservice.private_files import NotPrivate

__all__ = ["CACHE_DIR_VARIABLE", "main"]

#: The environment variable that names the cache when ``--cache-dir`` does not.
CACHE_DIR_VARIABLE = "VMSERVICE_CONTROLPLANE_DIR"

T = TypeVar("T")
Out = Callable[[str], None]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vmservice.devcluster",
                                     description="a Kubernetes control plane for development")
    commands = parser.add_subparsers(dest="command", required=True)
    cache_dir = os.environ.get(CACHE_DIR_VARIABLE) or DEFAULT_CACHE_DIR
    build = commands.add_parser("build", help="build the control plane's programs unless they are cached")
    begin = commands.add_parser("start", help="start a control plane in a directory unless one runs there")
    for command in (build, begin):
        command.add_argument("--cache-dir", default=cache_dir,
                             help=f"where the built programs are kept (default ${CACHE_DIR_VARIABLE} or {DEFAULT_CACHE_DIR})")
    begin.add_argument("--nodes", type=_checked(parse_nodes), default=parse_nodes(DEFAULT_NODES),
                       help=f"the node names that get an identity, comma-separated (default {DEFAULT_NODES})")
    begin.add_argument("--ports", type=_checked(parse_ports), default=None,
                       help="'auto' (free ports) or the first of five consecutive ports (default auto)")
    end = commands.add_parser("stop", help="end the recorded control plane of a directory")
    end.add_argument("--purge", action="store_true", help="remove the directory too (etcd's data included)")
    query = commands.add_parser("status", help="show whether the control plane of a directory runs and is ready")
    for command in (begin, end, query):
        command.add_argument("--dir", required=True, help="the control plane's directory")
    return parser


def _checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` as an argparse type: its ValueError becomes a usage error (exit status 2, no traceback)."""
    def checked(text: str) -> T:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return checked


def _build(options: argparse.Namespace, out: Out) -> int:
    build_entry(options.cache_dir, out)
    return 0


#: What each command runs: its options and the output in, the exit status out.
COMMANDS: dict[str, Callable[[argparse.Namespace, Out], int]] = {
    "build": _build,
    "start": lambda options, out: start(options.dir, options.nodes, options.ports, options.cache_dir, out),
    "stop": lambda options, out: stop(options.dir, options.purge, out),
    "status": lambda options, out: status(options.dir, out),
}


def _print(line: str) -> None:
    print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the command line; the exit status (0 on success, 1 on a failure, 2 on a usage error).

    :param argv: the arguments after the program name (``sys.argv[1:]`` by default).
    """
    options = _parser().parse_args(argv)
    try:
        return COMMANDS[options.command](options, _print)
    except (BuildFailed, RecipeError, NotPrivate, ValueError) as failure:
        sys.stderr.write(f"error: {failure}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
