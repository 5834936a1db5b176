# -*- test-case-name: tests.guest.test_execution -*-
"""
The guest's exec handler without children: the pure helpers (quoting, argv,
working directories, the OPEN header, when fork is skipped) and the refusal of
a bad header by a :class:`~vmservice.guest.agent.Session`.  The record codec is
tested in :mod:`tests.wire.test_payloads`; the handler with real child
processes in :mod:`tests.integration.guest.test_execution`.
"""

from __future__ import annotations

import builtins
import os
import shlex
from typing import Any

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest import exec_spec, execution, spawning
from vmservice.guest.context import AgentContext
from vmservice.guest.exec_spec import (DEFAULT_PATH, argv, default_path, resolve_cwd, runnable, shell_quote,
                                       usable_shell)
from vmservice.wire import ResetCode
from vmservice.wire.events import Open, Reset
from vmservice.wire.openheaders.exec import ExecHeader
from vmservice.wire.openheaders.fields import BadHeader


class PasswdTests(SynchronousTestCase):
    """``/etc/passwd`` is read again only when it changed."""

    def test_cached_until_changed(self) -> None:
        """The second ask opens nothing; a changed file (another size, times or inode) is read again."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("root:x:0:0:root:/root:/bin/bash\nu:x:1000:1000::/home/u:/bin/sh\nv:x:1000:1000::/v:/bin/sh\n")
        self.assertEqual(exec_spec.passwd_entry(1000, path), ("u", "/home/u"))
        opened: list[str] = []
        real_open = builtins.open

        def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
            opened.append(str(file))
            return real_open(file, *args, **kwargs)

        self.patch(builtins, "open", counting_open)
        self.assertEqual(exec_spec.passwd_entry(0, path), ("root", "/root"))
        self.assertIsNone(exec_spec.passwd_entry(7, path))
        self.assertEqual(opened, [])
        with real_open(path, "a") as f:
            f.write("w:x:7:7::/w:/bin/sh\n")
        self.assertEqual(exec_spec.passwd_entry(7, path), ("w", "/w"))
        self.assertEqual(opened, [path])
        os.rename(path, path + ".old")
        self.assertIsNone(exec_spec.passwd_entry(7, path))


class HelperTests(SynchronousTestCase):
    """Quoting, argv, working directories and the header."""

    @given(st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))))
    def test_quote_is_one_word(self, word: str) -> None:
        """A quoted word splits back into exactly itself."""
        self.assertEqual(shlex.split(shell_quote(word)), [word])

    def test_argv_without_shell(self) -> None:
        """An empty shell: cmd is the program and args its argv."""
        self.assertEqual(argv(ExecHeader(cmd="ls", args=("-l",), shell="")), ["ls", "-l"])
        self.assertEqual(argv(ExecHeader(cmd="ls")), ["/bin/bash", "-c", "ls"])

    def test_usable_shell(self) -> None:
        """
        The default shell when it can run; else /bin/sh; else the runtime's busybox sh (an imported
        image without a shell). Another shell is taken as it is; no shell stays none.
        """
        self.assertEqual(usable_shell("/bin/bash", lambda path: True), "/bin/bash")
        self.assertEqual(usable_shell("/bin/bash", lambda path: path == "/bin/sh"), "/bin/sh")
        self.assertEqual(usable_shell("/bin/bash", lambda path: path.startswith("/opt/")),
                         "/opt/vmservice/runtime/bin/sh")
        self.assertEqual(usable_shell("/bin/bash", lambda path: False), "/bin/bash")
        self.assertEqual(usable_shell("", lambda path: False), "")
        self.assertEqual(usable_shell("/no/shell", lambda path: path == "/bin/sh"), "/no/shell")

    def test_runnable(self) -> None:
        """The exec read from a header runs with the usable shell; its other fields stay."""
        spec = ExecHeader(cmd="x", args=("a",), uid=3, shell="/no/shell")
        self.assertEqual(runnable(spec), spec)
        self.assertEqual(runnable(ExecHeader(cmd="x", shell="")), ExecHeader(cmd="x", shell=""))

    def test_shell_program(self) -> None:
        """The default shell runs as the static bash when the image has it; any other program as itself."""
        self.assertEqual(exec_spec.shell_program("/bin/bash", lambda path: path == "/bin/bash-static"),
                         "/bin/bash-static")
        self.assertEqual(exec_spec.shell_program("/bin/bash", lambda path: False), "/bin/bash")
        self.assertEqual(exec_spec.shell_program("/bin/sh", lambda path: True), "/bin/sh")
        self.assertEqual(exec_spec.shell_program("/usr/bin/bash", lambda path: True), "/usr/bin/bash")

    def test_default_path(self) -> None:
        """The runtime's applets come last in PATH, only in an image that has them."""
        self.assertEqual(default_path(lambda path: False), DEFAULT_PATH)
        self.assertEqual(default_path(lambda path: path == "/opt/vmservice/runtime/bin"),
                         DEFAULT_PATH + ":/opt/vmservice/runtime/bin")

    def test_resolve_cwd(self) -> None:
        """Absolute stays, ~ and relative are below the home, none without a home is an error."""
        self.assertEqual(resolve_cwd("/tmp", None), "/tmp")
        self.assertEqual(resolve_cwd("~", "/root"), "/root")
        self.assertEqual(resolve_cwd("~/x", "/root"), "/root/x")
        self.assertEqual(resolve_cwd("x/y", "/home/u"), "/home/u/x/y")
        self.assertEqual(resolve_cwd("", None), "/")
        for bad in ("~", "x"):
            with self.assertRaises(ValueError):
                resolve_cwd(bad, None)
        with self.assertRaises(ValueError):
            resolve_cwd("~other", "/root")

    def test_header_checked(self) -> None:
        """Wrong types in the OPEN header are refused."""
        for header in ({}, {"cmd": ""}, {"cmd": "x", "args": "a"}, {"cmd": "x", "uid": True},
                       {"cmd": "x", "umask": 0o1000}, {"cmd": "x", "stdin": "yes"}, {"cmd": "x", "uid": 2**32}):
            with self.assertRaises(BadHeader):
                ExecHeader.from_json(header)
        spec = ExecHeader.from_json({"cmd": "x", "args": ["a"], "env": ["A=1"], "umask": 18, "stdin": True})
        self.assertEqual((spec.args, spec.env, spec.umask, spec.stdin), (("a",), ("A=1",), 18, True))

    def test_identity_is_set(self) -> None:
        """Only a request for exactly the agent's ids and no other groups skips fork."""
        uid, gid = os.getuid(), os.getgid()
        self.patch(os, "getgroups", lambda: [])
        self.assertTrue(spawning._identity_is_set(ExecHeader(cmd="x", uid=uid, gid=gid)))
        self.assertFalse(spawning._identity_is_set(ExecHeader(cmd="x", uid=uid + 1, gid=gid)))
        self.assertFalse(spawning._identity_is_set(ExecHeader(cmd="x", uid=uid, gid=gid + 1)))
        self.patch(os, "getgroups", lambda: [gid + 1])
        self.assertFalse(spawning._identity_is_set(ExecHeader(cmd="x", uid=uid, gid=gid)))


class HeaderTests(GuestSessionMixin, SynchronousTestCase):
    """:class:`ExecHandler` refusing a header in a real session, before anything starts."""

    def setUp(self) -> None:
        self.start_session({"exec": execution.ExecHandler}, AgentContext("t"))
        self.handshake()

    def test_bad_header(self) -> None:
        """A malformed header resets the stream with BAD_HEADER."""
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "exec"}))
        events = [e for e in self.receive() if isinstance(e, Reset)]
        self.assertEqual([e.code for e in events], [ResetCode.BAD_HEADER])
