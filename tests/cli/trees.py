"""
A small tree on disk for the copy tests of ``vmctl cp`` (:mod:`tests.cli.test_copying`,
:mod:`tests.integration.cli.test_copying`): a script, a 300 kB file and a directory, each with a mode of
its own.
"""

from __future__ import annotations

import os


def make_tree(root: str) -> str:
    """
    Make a small tree at ``root``: a script, a 300 kB file and a directory,
    each with its own mode; answer ``root``.
    """
    os.makedirs(os.path.join(root, "sub", "deep"))
    with open(os.path.join(root, "a.sh"), "wb") as f:
        f.write(b"#!/bin/sh\n")
    with open(os.path.join(root, "sub", "data"), "wb") as f:
        f.write(os.urandom(300_000))
    os.chmod(os.path.join(root, "a.sh"), 0o750)
    os.chmod(os.path.join(root, "sub", "data"), 0o604)
    os.chmod(os.path.join(root, "sub", "deep"), 0o775)
    return root
