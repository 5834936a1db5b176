# -*- test-case-name: tests.devcluster.test_main -*-
"""
``python -m vmservice.devcluster``: build, start, stop and query a development control plane.

Usage::

    python -m vmservice.devcluster build [--cache-dir DIR]
    python -m vmservice.devcluster start --dir DIR [--nodes NAME,NAME,...] [--ports auto|BASE] [--cache-dir DIR]
    python -m vmservice.devcluster stop --dir DIR [--purge]
    python -m vmservice.devcluster status --dir DIR

``start`` prints ``export KUBECONFIG=DIR/admin.kubeconfig`` as its last line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from vmservice.devcluster.build import DEFAULT_CACHE_DIR, BuildFailed, build_entry
from vmservice.devcluster.recipe import RecipeError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vmservice.devcluster",
                                     description="a Kubernetes control plane for development")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the control plane's programs unless they are cached")
    build.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help=f"the cache (default {DEFAULT_CACHE_DIR})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the command line; the exit status (0 on success, 1 on a failure, 2 on a usage error).

    :param argv: the arguments after the program name (``sys.argv[1:]`` by default).
    """
    options = _parser().parse_args(argv)
    out = lambda line: print(line, flush=True)  # noqa: E731
    try:
        if options.command == "build":
            build_entry(options.cache_dir, out)
    except (BuildFailed, RecipeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
