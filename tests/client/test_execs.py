# -*- test-case-name: tests.client.test_execs -*-
"""
Tests for :mod:`vmservice.client.execs` without a server: :class:`ExecOptions`,
how a command runs, as the exec route's query.  The three ways to run one
against the API app served on loopback are tested in
:mod:`tests.integration.test_client`.
"""

from __future__ import annotations

from attrs import evolve
from twisted.trial.unittest import SynchronousTestCase

from vmservice.client.execs import ExecOptions


class ExecOptionsTests(SynchronousTestCase):
    def test_defaults(self) -> None:
        """By default only the command, its words and base64 stdio are said; the rest is the daemon's default."""
        self.assertEqual(ExecOptions().params("ls", ["-l"]), {
            "cmd": "ls", "args": ["-l"], "env": [], "uid": None, "gid": None, "cwd": None, "shell": None,
            "permissions": None, "stdout": None, "stderr": None, "stdio": "base64",
        })

    def test_environment_forms(self) -> None:
        """An environment given as a mapping or as K=V words is kept as K=V words, in order."""
        self.assertEqual(ExecOptions(env={"A": "1", "B": "x=y"}).env, ("A=1", "B=x=y"))
        self.assertEqual(ExecOptions(env=["A=1"]).env, ("A=1",))
        self.assertEqual(ExecOptions(env=None).env, ())
        self.assertEqual(ExecOptions(env={"A": "1"}), ExecOptions(env=["A=1"]))

    def test_fields_as_query(self) -> None:
        """Each field goes to its query parameter; a umask as four octal digits, text as given."""
        options = ExecOptions(env=("A=1",), uid=7, gid=8, cwd="/tmp", shell="", permissions=0o27, stdout=False,
                              stderr=True, stdio="text")
        self.assertEqual(options.params("c", ()), {
            "cmd": "c", "args": [], "env": ["A=1"], "uid": 7, "gid": 8, "cwd": "/tmp", "shell": "",
            "permissions": "0027", "stdout": False, "stderr": True, "stdio": "text",
        })
        self.assertEqual(evolve(options, permissions="0022").params("c", ())["permissions"], "0022")

    def test_frozen(self) -> None:
        """An ExecOptions is a frozen record: one can be shared by many calls."""
        from attrs.exceptions import FrozenInstanceError

        with self.assertRaises(FrozenInstanceError):
            ExecOptions().uid = 1  # type: ignore[misc]
