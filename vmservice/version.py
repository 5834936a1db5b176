# -*- test-case-name: tests.test_version,tests.api.test_app -*-
"""
What this build is: package version, the git commit of the checkout, and the
platform in the names existing clients expect (Go's GOOS/GOARCH).
"""

from __future__ import annotations

import os
import platform

from . import __version__

_GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}


def git_commit(start: str | None = None) -> str:
    """
    The commit checked out where the package lives, read from ``.git``
    without running git; ``unknown`` when it is not a checkout.

    :param start: the directory to look up from (this package's by default).
    """
    directory = os.path.abspath(start or os.path.dirname(__file__))
    while True:
        git = os.path.join(directory, ".git")
        if os.path.isdir(git):
            return _resolve_head(git)
        parent = os.path.dirname(directory)
        if parent == directory:
            return "unknown"
        directory = parent


def _resolve_head(git: str) -> str:
    try:
        with open(os.path.join(git, "HEAD")) as f:
            head = f.read().strip()
        if not head.startswith("ref: "):
            return head or "unknown"
        ref = head[5:]
        path = os.path.join(git, ref)
        if os.path.exists(path):
            with open(path) as f:
                return f.read().strip() or "unknown"
        with open(os.path.join(git, "packed-refs")) as f:
            for line in f:
                sha, _, name = line.strip().partition(" ")
                if name == ref:
                    return sha
    except OSError:
        pass
    return "unknown"


def go_platform() -> tuple[str, str]:
    """``(GOOS, GOARCH)`` of this host, e.g. ``("linux", "amd64")``."""
    machine = platform.machine()
    return platform.system().lower(), _GOARCH.get(machine, machine)


__all__ = ["__version__", "git_commit", "go_platform"]
