# -*- test-case-name: tests.guest.test_shell -*-
"""
Tests for :mod:`vmservice.guest.shell` without processes: header checks and
finding a session's members.  The real pty and bash are in
:mod:`tests.integration.guest.test_shell`.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest import shell
from vmservice.wire import ResetCode
from vmservice.wire.events import Open, Reset
from vmservice.wire.openheaders.exec import ExecHeader


class HeaderTests(GuestSessionMixin, SynchronousTestCase):
    """A malformed header resets the stream with BAD_HEADER and starts nothing."""

    def setUp(self) -> None:
        self.start_session({"shell": shell.ShellHandler})
        self.handshake()

    def test_bad_fields(self) -> None:
        """Wrong types or ranges of uid, gid, cols, rows, shell or cwd are refused."""
        for header in ({"uid": -1}, {"gid": "0"}, {"cols": True}, {"rows": 2**32}, {"shell": 3}, {"cwd": None},
                       {"env": "A=1"}, {"env": [1]}):
            stream_id = self.host.next_stream_id()
            self.send(Open(stream_id, {"op": "shell", **header}))
            [event] = [e for e in self.receive() if getattr(e, "stream_id", None) == stream_id]
            self.assertIsInstance(event, Reset, header)
            self.assertEqual(event.code, ResetCode.BAD_HEADER)


class EnvironmentTests(SynchronousTestCase):
    """:func:`shell_env`: an exec's environment with ``TERM``, the header's entries winning."""

    def test_term_default(self) -> None:
        """Without entries ``TERM`` is ``xterm-256color``, beside the user's variables."""
        env = shell.shell_env(ExecHeader(cmd="/bin/bash", shell="/bin/bash"), ("user", "/home/user"))
        self.assertEqual((env["TERM"], env["HOME"], env["USER"], env["SHELL"]),
                         ("xterm-256color", "/home/user", "user", "/bin/bash"))

    def test_entries_win(self) -> None:
        """The header's entries are laid over everything, ``TERM`` too; later ones win."""
        spec = ExecHeader(cmd="/bin/bash", env=("TERM=vt100", "A=1", "A=2", "HOME=/x"))
        env = shell.shell_env(spec, None)
        self.assertEqual((env["TERM"], env["A"], env["HOME"]), ("vt100", "2", "/x"))


class SessionMembersTests(SynchronousTestCase):
    """:func:`session_members` reads the session id from ``/proc/<pid>/stat``."""

    def test_members(self) -> None:
        """Processes whose session field matches are listed, whatever their command name holds."""
        proc = self.mktemp()
        os.makedirs(proc)
        for pid, comm, sid in ((10, "bash", 10), (11, "odd ) name 10", 10), (12, "sleep", 12), (13, "x", 100)):
            os.makedirs(f"{proc}/{pid}")
            with open(f"{proc}/{pid}/stat", "w") as f:
                f.write(f"{pid} ({comm}) S 1 {pid} {sid} 34816 0 0\n")
        os.makedirs(f"{proc}/self")
        self.assertEqual(sorted(shell.session_members(10, proc)), [10, 11])
