# -*- test-case-name: tests.integration.test_e2b_commands -*-
"""
Commands and terminals of E2B sandboxes driven by the official E2B Python
SDK (``e2b``, unchanged, sync) against a real daemon and real guests:
``commands.run`` (output, exit codes, environments, working directories,
callbacks, stdin), background commands listed, reconnected and killed, a
terminal typed into and resized, a pause and a kill under running commands.

The sandboxes boot the ``e2b`` image (user ``user``, the calls' default);
one test acts as ``root``.
"""

from __future__ import annotations


from e2b import CommandExitException, PtySize, Sandbox

from tests.integration.daemon import wait_until
from tests.integration.e2b_daemon import E2bDaemonTestCase

#: The shared sandbox's create-time environment.
SANDBOX_ENVS = {"GLOBAL_VAR": "sandbox", "SHARED": "sandbox"}
ROOT = "root"


class E2bCommandTests(E2bDaemonTestCase):
    """One daemon, one shared sandbox for the tests that leave it as they found it."""

    timeout = 300
    sandbox_envs = SANDBOX_ENVS

    def test_run(self) -> None:
        """``run``: stdout, exit code 0, the output callbacks."""
        seen: list[str] = []
        result = self.sandbox.commands.run("echo hi; echo there >&2", on_stdout=seen.append,
                                           on_stderr=seen.append)
        self.assertEqual((result.stdout, result.stderr, result.exit_code, result.error), ("hi\n", "there\n", 0, None))
        self.assertEqual(sorted(seen), ["hi\n", "there\n"])

    def test_failure(self) -> None:
        """A failing command raises ``CommandExitException`` with its code and stderr."""
        with self.assertRaises(CommandExitException) as caught:
            self.sandbox.commands.run("echo oops >&2; exit 3")
        self.assertEqual((caught.exception.exit_code, caught.exception.stderr), (3, "oops\n"))

    def test_envs(self) -> None:
        """The sandbox's envVars for every command, a command's own over them, not leaking to the next."""
        own = self.sandbox.commands.run('echo "$GLOBAL_VAR $SHARED $OWN"', envs={"SHARED": "mine", "OWN": "x"})
        self.assertEqual(own.stdout, "sandbox mine x\n")
        after = self.sandbox.commands.run('echo "${OWN:-unset} $SHARED"')
        self.assertEqual(after.stdout, "unset sandbox\n")

    def test_cwd_umask(self) -> None:
        """The user's home by default, a cwd given otherwise; umask 022."""
        self.assertEqual(self.sandbox.commands.run("pwd; umask; id -un").stdout, "/home/user\n0022\nuser\n")
        self.assertEqual(self.sandbox.commands.run("pwd; id -u", user=ROOT).stdout, "/root\n0\n")
        self.assertEqual(self.sandbox.commands.run("pwd", cwd="/tmp").stdout, "/tmp\n")
        self.assertEqual(self.sandbox.commands.run("sudo -n id -u").stdout, "0\n")

    def test_background_list_kill(self) -> None:
        """A background command is listed; ``kill`` ends it (True, then False); its handle raises."""
        handle = self.sandbox.commands.run("sleep 600", background=True)
        listed = {process.pid: process for process in self.sandbox.commands.list()}
        self.assertIn(handle.pid, listed)
        self.assertEqual(listed[handle.pid].args, ["-l", "-c", "sleep 600"])
        self.assertTrue(self.sandbox.commands.kill(handle.pid))
        with self.assertRaises(CommandExitException) as caught:
            handle.wait()
        self.assertEqual(caught.exception.exit_code, -1)
        wait_until("the killed command gone from the list",
                   lambda: handle.pid not in [p.pid for p in self.sandbox.commands.list()], 10, 0.2)
        self.assertFalse(self.sandbox.commands.kill(handle.pid))

    def test_stdin(self) -> None:
        """``stdin=True``: what ``send_stdin`` sends is read; ``close_stdin`` ends it."""
        handle = self.sandbox.commands.run("cat", background=True, stdin=True)
        self.sandbox.commands.send_stdin(handle.pid, "hello\n")
        self.sandbox.commands.close_stdin(handle.pid)
        self.assertEqual(handle.wait().stdout, "hello\n")

    def test_connect(self) -> None:
        """A disconnected command runs on; ``connect`` by pid streams it from then on to its end."""
        handle = self.sandbox.commands.run("sleep 1; for i in 1 2 3; do echo $i; sleep 0.3; done; exit 4",
                                           background=True)
        handle.disconnect()
        again = self.sandbox.commands.connect(handle.pid)
        with self.assertRaises(CommandExitException) as caught:
            again.wait()
        self.assertEqual((caught.exception.exit_code, caught.exception.stdout), (4, "1\n2\n3\n"))

    def test_pty(self) -> None:
        """A terminal: typed input echoed and run with the sandbox's envVars, resized, killed."""
        handle = self.sandbox.pty.create(PtySize(rows=24, cols=80), envs={"OWN": "pty"})
        self.sandbox.pty.send_stdin(handle.pid, b"echo MARK-$TERM-$GLOBAL_VAR-$OWN\n")
        self.sandbox.pty.resize(handle.pid, PtySize(rows=30, cols=100))
        self.sandbox.pty.send_stdin(handle.pid, b"stty size\n")
        output = b""
        for _, _, pty in handle:
            output += pty or b""
            if b"MARK-xterm-256color-sandbox-pty" in output and b"30 100" in output:
                break
        self.assertIn(b"MARK-xterm-256color-sandbox-pty", output)
        self.assertTrue(self.sandbox.pty.kill(handle.pid))
        with self.assertRaises(CommandExitException):
            handle.wait()

    def test_pause_and_kill_mid_command(self) -> None:
        """
        A pause breaks a command's stream and ends it (nothing listed after
        the resume); a kill under a running command makes it raise.
        """
        sandbox = Sandbox.create()
        self.addCleanup(lambda: Sandbox.kill(sandbox.sandbox_id))
        paused = sandbox.commands.run("sleep 600", background=True)
        self.assertTrue(sandbox.pause())
        self.assertRaises(Exception, paused.wait)
        resumed = Sandbox.connect(sandbox.sandbox_id, timeout=120)
        self.assertEqual(resumed.commands.list(), [])
        running = resumed.commands.run("sleep 600", background=True)
        self.assertTrue(Sandbox.kill(sandbox.sandbox_id))
        self.assertRaises(Exception, running.wait)
        self.assertFalse(resumed.is_running())
