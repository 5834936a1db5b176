"""
Short directories for the tests whose UNIX socket paths would be too long under trial's ``mktemp()`` (a
socket's path is limited to 107 bytes, and a test's temporary directory is named after the test):
:func:`temp_dir` under ``/tmp``, removed after the test, and :func:`short_dir` under trial's working
directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from twisted.trial.unittest import SynchronousTestCase


def temp_dir(case: SynchronousTestCase) -> str:
    """
    A short temporary directory (UNIX socket paths are limited to 107 bytes),
    removed after the test.
    """
    path = tempfile.mkdtemp(prefix="vmsa-", dir="/tmp")
    case.addCleanup(shutil.rmtree, path, True)
    return path


def short_dir() -> str:
    """
    A new directory under trial's working directory with a short name, for
    the fleet's tests, whose names would make ``mktemp()`` too long for the
    nodes' UNIX socket paths.
    """
    return os.path.relpath(tempfile.mkdtemp(prefix="lc", dir="."))
