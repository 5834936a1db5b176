"""
What the tests of :mod:`vmservice.config` share: :func:`parse_text` and
:func:`group_text`, configurations written in a test, :data:`EXAMPLE`, the
shipped example, and :class:`ConfigErrorCase`, whose
:meth:`~ConfigErrorCase.assertConfigError` checks the one line of a problem.
"""

from __future__ import annotations

import os
import textwrap

from twisted.trial.unittest import SynchronousTestCase

from vmservice.config import Config, ConfigError, parse_config

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf",
                       "vmservice.yaml")
MiB = 1024**2
GiB = 1024**3


def parse_text(text: str, environ: dict[str, str] | None = None) -> Config:
    """
    Parse dedented ``text`` as ``test.yaml`` with an empty environment (unless
    given), so that the tests do not depend on the caller's shell.
    """
    return parse_config(textwrap.dedent(text), "test.yaml", environ={} if environ is None else environ)


def group_text(body: str) -> str:
    """
    A configuration whose first host group is ``body`` (YAML indented by
    six spaces under ``- ``); the group's first key is on line 3.
    """
    return "config:\n  host_groups:\n    - " + textwrap.dedent(body).strip().replace("\n", "\n      ") + "\n"


class ConfigErrorCase(SynchronousTestCase):
    """A test case of the configuration's problems."""

    def assertConfigError(self, text: str, expected: str, line: int | None = None) -> ConfigError:
        """
        Parsing ``text`` fails with exactly ``expected`` as ``str()`` (one line)
        and, if given, on ``line`` of ``test.yaml``.
        """
        error: ConfigError = self.assertRaises(ConfigError, parse_text, text)
        self.assertEqual(str(error), expected)
        self.assertNotIn("\n", str(error))
        self.assertEqual(f"{error.path}: {error.message}", expected)
        if line is not None:
            self.assertEqual(
                (error.source, error.line, error.location), ("test.yaml", line, f"test.yaml:{line}")
            )
        return error
