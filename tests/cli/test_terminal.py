# -*- test-case-name: tests.cli.test_terminal -*-
"""
Tests for :mod:`vmservice.cli.terminal` and the ``vmctl shell`` grammar; the
terminal itself (raw mode, SIGWINCH) is exercised in tmux by
:mod:`tests.integration.test_shell`.
"""

from __future__ import annotations

import io
import os

from twisted.trial.unittest import SynchronousTestCase

from vmservice.cli.main import parse_args
from vmservice.cli.terminal import terminal_size
from vmservice.client.shell import shell_path


class TerminalTests(SynchronousTestCase):
    """Sizes, options and the request path."""

    def test_size_of_a_pipe(self) -> None:
        """A descriptor that is not a terminal has the default size 80 x 24."""
        r, w = os.pipe()
        self.addCleanup(os.close, r)
        self.addCleanup(os.close, w)
        self.assertEqual(terminal_size(r), (80, 24))

    def test_options(self) -> None:
        """vmctl shell takes HOST, --uid, --gid, --cwd and --shell; a bad uid is a usage error."""
        options = parse_args(["shell", "demo-1", "--uid", "1000", "--gid", "100", "--cwd", "/srv", "--shell",
                              "/bin/sh"], {})
        self.assertEqual((options.hostname, options.uid, options.gid, options.cwd, options.shell),
                         ("demo-1", 1000, 100, "/srv", "/bin/sh"))
        defaults = parse_args(["shell", "demo-1"], {})
        self.assertEqual((defaults.uid, defaults.gid, defaults.cwd, defaults.shell), (None, None, None, None))
        import contextlib

        with contextlib.redirect_stderr(io.StringIO()):
            self.assertRaises(SystemExit, parse_args, ["shell", "demo-1", "--uid", "-1"], {})

    def test_path(self) -> None:
        """uid and gid go in the query only when non-zero (as existing clients send them); values are quoted."""
        self.assertEqual(shell_path("demo-1"), "/vm/demo-1/shell")
        self.assertEqual(shell_path("demo-1", 0, 0, None, None), "/vm/demo-1/shell")
        self.assertEqual(shell_path("demo-1", 1000, 5, "/bin/sh", "/a b"),
                         "/vm/demo-1/shell?shell=%2Fbin%2Fsh&uid=1000&gid=5&cwd=%2Fa+b")
