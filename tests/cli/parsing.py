"""
What the tests of vmctl's grammar share: :func:`parse`, ``vmctl``'s options
for some words, in a given environment, and :class:`GrammarCase`, whose
:meth:`~GrammarCase.assertUsageError` says that some words are refused.
"""

from __future__ import annotations

import io
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from vmservice.cli import main as cli
from vmservice.cli.main import parse_args


def parse(*argv: str, **environ: str) -> Any:
    """The options ``vmctl ARGV...`` gives in the environment ``environ`` (usage errors raise ``SystemExit``)."""
    return parse_args(argv, environ)


class GrammarCase(SynchronousTestCase):
    """A test case of vmctl's grammar."""

    def assertUsageError(self, *argv: str) -> str:
        """
        Assert that ``vmctl ARGV...`` is a usage error: exit status 2, the
        usage on standard error.

        :return: what was written to standard error.
        """
        stderr = io.StringIO()
        self.patch(cli.sys, "stderr", stderr)
        with self.assertRaises(SystemExit) as raised:
            parse(*argv)
        self.assertEqual(raised.exception.code, 2)
        self.assertIn("usage: vmctl", stderr.getvalue())
        return stderr.getvalue()
