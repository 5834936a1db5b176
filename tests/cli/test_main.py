# -*- test-case-name: tests.cli.test_main -*-
"""
Tests for :mod:`vmservice.cli.main` without a server: argument parsing and
request building as pure functions (``vmctl tag``'s in :mod:`tests.cli.test_tagging`,
``vmctl secret``'s in :mod:`tests.cli.test_secrets`), and :func:`main` with the
builder and ``react`` replaced (``vmctl image`` in :mod:`tests.cli.test_images`).  Whole ``vmctl`` runs in-process
against the API app served on loopback are tested in
:mod:`tests.integration.cli.test_main`.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from typing import Any

from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.cli.parsing import GrammarCase, parse
from vmservice.cli import copying
from vmservice.cli import main as cli
from vmservice.cli.context import Failed as _Failed
from vmservice.cli.execs import exit_status
from vmservice.cli.main import resolve_token
from vmservice.cli.nodes import create_body
from vmservice.client import DEFAULT_URL, ExecRecord


class ParseTests(GrammarCase):
    def test_defaults(self) -> None:
        """Without options or environment the URL is the default and there is no token."""
        options = parse("list")
        self.assertEqual((options.url, options.token, options.token_file), (DEFAULT_URL, None, None))
        self.assertEqual((options.command, options.group, options.tag, options.tag_prefix, options.json),
                         ("list", None, None, None, False))

    def test_environment(self) -> None:
        """$VMSERVICE_URL and $VMSERVICE_TOKEN are used when no option is given; options win."""
        env = {"VMSERVICE_URL": "/run/v.sock", "VMSERVICE_TOKEN": "t1"}
        options = parse("info", **env)
        self.assertEqual((options.url, options.token), ("/run/v.sock", "t1"))
        options = parse("--url", "http://h:1", "info", "--token", "t2", **env)
        self.assertEqual((options.url, options.token), ("http://h:1", "t2"))
        self.assertIsNone(parse("info", VMSERVICE_TOKEN="").token)

    def test_token_file_beats_environment(self) -> None:
        """--token-file replaces $VMSERVICE_TOKEN; with --token it is a usage error."""
        options = parse("--token-file", "/x/token", "info", VMSERVICE_TOKEN="env")
        self.assertEqual((options.token, options.token_file), (None, "/x/token"))
        self.assertUsageError("--token", "a", "--token-file", "/x", "info")

    def test_options_before_or_after_command(self) -> None:
        """Connection options are accepted before and after the command, and an earlier one is kept."""
        self.assertEqual(parse("--url", "http://a:1", "groups").url, "http://a:1")
        self.assertEqual(parse("groups", "--url", "http://b:2").url, "http://b:2")
        self.assertEqual(parse("--token", "x", "groups").token, "x")

    def test_list(self) -> None:
        """list takes an optional group and either --tag or --tag-prefix, not both."""
        options = parse("list", "demo", "--tag-prefix", "team-", "--json")
        self.assertEqual((options.group, options.tag, options.tag_prefix, options.json), ("demo", None, "team-", True))
        self.assertUsageError("list", "--tag", "a", "--tag-prefix", "b")

    def test_create(self) -> None:
        """create collects tags, sizes and flags into a CreateNodeRequest with only the fields given."""
        options = parse("create", "demo", "--wait", "agent", "--timeout", "2m", "--tag", "a", "--tag", "b",
                        "--cpus", "1", "--ram", "256M", "--persistent", "--protected")
        self.assertEqual((options.group, options.wait, options.timeout), ("demo", "agent", "2m"))
        self.assertEqual(create_body(options),
                         {"tags": ["a", "b"], "cpus": 1, "ram_bytes": 256 << 20, "persistent": True, "protected": True})
        self.assertEqual(create_body(parse("create", "demo")), {})
        self.assertEqual(create_body(parse("create", "demo", "--ram-bytes", "1000"))["ram_bytes"], 1000)
        self.assertEqual(create_body(parse("create", "demo", "--image", "dev")), {"disk_image": "dev"})

    def test_create_devices(self) -> None:
        """--gpus and --pci-device (repeated) become gpu_count and pci_devices."""
        options = parse("create", "demo", "--gpus", "2", "--pci-device", "01:00.0", "--pci-device", "0000:02:00.0")
        self.assertEqual(create_body(options), {"gpu_count": 2, "pci_devices": ["01:00.0", "0000:02:00.0"]})
        self.assertUsageError("create", "demo", "--gpus", "0")

    def test_create_guest_configuration(self) -> None:
        """--userdata and --ssh-key read files (keys one per line, comments skipped); the other options pass."""
        directory = tempfile.mkdtemp(dir="/tmp")
        self.addCleanup(shutil.rmtree, directory)
        script, keys = os.path.join(directory, "setup.sh"), os.path.join(directory, "id.pub")
        with open(script, "w") as stream:
            stream.write("echo hi\n")
        with open(keys, "w") as stream:
            stream.write("# mine\nssh-ed25519 AAAA a@b\n\nssh-rsa BBBB\n")
        options = parse("create", "demo", "--hostname", "web", "--userdata", script, "--secret", "db", "--secret", "api",
                        "--ssh-key", keys, "--import-user", "alice", "--codehost-user", "octocat")
        self.assertEqual(create_body(options), {
            "hostname": "web", "userdata": "echo hi\n", "secrets": ["db", "api"],
            "ssh_keys": ["ssh-ed25519 AAAA a@b", "ssh-rsa BBBB"], "import_user": "alice", "codehost_user": "octocat"})
        self.assertRaises(_Failed, create_body, parse("create", "demo", "--userdata", os.path.join(directory, "none")))

    def test_create_usage_errors(self) -> None:
        """Bad sizes, durations, counts and waits, and both RAM options at once, are usage errors."""
        self.assertUsageError("create")
        self.assertUsageError("create", "demo", "--ram", "lots")
        self.assertUsageError("create", "demo", "--ram", "1G", "--ram-bytes", "5")
        self.assertUsageError("create", "demo", "--timeout", "soon")
        self.assertUsageError("create", "demo", "--timeout", "0s")
        self.assertUsageError("create", "demo", "--cpus", "0")
        self.assertUsageError("create", "demo", "--wait", "forever")

    def test_other_commands(self) -> None:
        """delete, logs, health and image build take their arguments and defaults."""
        options = parse("delete", "demo", "demo-1")
        self.assertEqual((options.group, options.hostname), ("demo", "demo-1"))
        self.assertEqual(parse("logs", "demo-1", "--lines", "0").lines, 0)
        self.assertIsNone(parse("logs", "demo-1").lines)
        self.assertUsageError("logs", "demo-1", "--lines", "-1")
        self.assertEqual(parse("health", "demo-1").hostname, "demo-1")
        options = parse("image", "build")
        self.assertEqual((options.image_dir, options.name, options.name_option, options.force, options.handler),
                         (None, None, None, False, None))
        self.assertEqual(parse("image", "build", "dev").name, "dev")
        options = parse("image", "list", "--json", "--url", "http://a:1")
        self.assertEqual((options.json, options.url, options.handler.__name__), (True, "http://a:1", "_image_list"))
        self.assertUsageError("image")
        self.assertUsageError()

    def test_stats_and_top(self) -> None:
        """stats takes an optional NODE and --json; top an interval (default 2 s) and a number of refreshes."""
        options = parse("stats")
        self.assertEqual((options.hostname, options.json, options.handler.__name__), (None, False, "_stats"))
        self.assertEqual((parse("stats", "demo-1", "--json").hostname, parse("stats", "--json").json), ("demo-1", True))
        options = parse("top")
        self.assertEqual((options.interval, options.iterations, options.handler.__name__), (2.0, None, "_top"))
        self.assertEqual(parse("top", "--once").iterations, 1)
        self.assertEqual((parse("top", "-n", "3", "--interval", "0.5").iterations,
                          parse("top", "--interval", "0.5").interval), (3, 0.5))
        for bad in (["--interval", "0"], ["--interval", "x"], ["--interval", "nan"], ["-n", "0"]):
            self.assertUsageError("top", *bad)

    def test_lifecycle(self) -> None:
        """Each lifecycle command takes HOST; restore and relaunch --wait agent and --timeout; each has its action."""
        for name in ("pause", "resume", "suspend", "restore", "relaunch", "shutdown", "reboot"):
            self.assertEqual(parse(name, "demo-1").hostname, "demo-1")
            self.assertUsageError(name)
        options = parse("restore", "demo-1", "--wait", "agent", "--timeout", "90s")
        self.assertEqual((options.wait, options.timeout), ("agent", "90s"))
        options = parse("relaunch", "demo-1", "--wait", "agent", "--timeout", "2m", "--json")
        self.assertEqual((options.wait, options.timeout, options.json), ("agent", "2m", True))
        options = parse("relaunch", "demo-1")
        self.assertEqual((options.wait, options.timeout, options.json), (None, None, False))
        self.assertEqual((parse("shutdown", "h").action, parse("reboot", "h").action), ("shutdown", "reboot"))
        self.assertUsageError("restore", "h", "--wait", "userdata")
        self.assertUsageError("relaunch", "h", "--timeout", "soon")
        self.assertUsageError("relaunch", "h", "--timeout", "0s")
        self.assertUsageError("pause", "h", "--wait", "agent")

    def test_fork(self) -> None:
        """fork NODE [-n N] [--tag T]...; one new node by default."""
        options = parse("fork", "demo-1", "-n", "4", "--tag", "a", "--tag", "b")
        self.assertEqual((options.hostname, options.count, options.tags, options.json, options.handler.__name__),
                         ("demo-1", 4, ["a", "b"], False, "_fork"))
        options = parse("fork", "demo-1")
        self.assertEqual((options.count, options.tags), (1, None))
        self.assertUsageError("fork")
        self.assertUsageError("fork", "h", "-n", "x")

    def test_resolve_token(self) -> None:
        """The token file's first line is the token; a missing or empty file is a failure naming it."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("  abc  \nmore\n")
        self.assertEqual(resolve_token(parse("--token-file", path, "info")), "abc")
        self.assertEqual(resolve_token(parse("--token", "t", "info")), "t")
        with self.assertRaises(_Failed) as raised:
            resolve_token(parse("--token-file", path + ".missing", "info"))
        self.assertIn(path + ".missing", str(raised.exception))
        with open(path, "w"):
            pass
        self.assertRaises(_Failed, resolve_token, parse("--token-file", path, "info"))

    def test_resolve_token_of_the_daemons_file(self) -> None:
        """Of the daemon's token file (TOKEN [LABEL] lines, comments), the first token is sent, not its label."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("# rotated 2026-11-28\n\n  tok-new ci-2026  \ntok-old ci-2025\n")
        self.assertEqual(resolve_token(parse("--token-file", path, "info")), "tok-new")
        with open(path, "w") as f:
            f.write("# nothing but comments\n")
        self.assertRaises(_Failed, resolve_token, parse("--token-file", path, "info"))


class MainTests(SynchronousTestCase):
    def react(self, main: Any) -> None:
        """Stand-in for ``react``: run ``main`` to its end and exit the way ``react`` does."""
        outcome: list[Any] = []
        main(None).addBoth(outcome.append)
        self.assertEqual(len(outcome), 1)
        if isinstance(outcome[0], Failure):
            outcome[0].trap(SystemExit)
            raise SystemExit(outcome[0].value.code)
        raise SystemExit(0)

    def run_main(self, argv: list[str], builder: Any) -> int:
        import twisted.internet.task
        import vmservice.images.build as build

        self.patch(build, "build_image", builder)
        self.patch(twisted.internet.task, "react", self.react)
        self.patch(cli.sys, "stdout", io.StringIO())
        self.patch(cli.sys, "stderr", io.StringIO())
        with self.assertRaises(SystemExit) as raised:
            cli.main(argv)
        code: int = raised.exception.code  # type: ignore[assignment]
        return code

    def test_exit_status(self) -> None:
        """main() exits with the command's status: 0 on success, 1 on failure."""
        import vmservice.images.build as build

        def ok(*args: Any, **kwargs: Any) -> None:
            pass

        def broken(*args: Any, **kwargs: Any) -> None:
            raise build.BuildError("no")

        self.assertEqual(self.run_main(["image", "build"], ok), 0)
        self.assertEqual(self.run_main(["image", "build"], broken), 1)
        self.assertEqual(cli.sys.stderr.getvalue(), "vmctl: no\n")


class ExecFsParseTests(GrammarCase):
    def test_exec_words_after_double_dash(self) -> None:
        """Everything after the first -- is the command, verbatim, a later -- included; options go before it."""
        options = parse("exec", "demo-1", "--stdin", "--uid", "5", "--env", "A=1", "--", "echo", "--", "-x")
        self.assertEqual((options.hostname, options.words, options.stdin, options.uid, options.env),
                         ("demo-1", ["echo", "--", "-x"], True, 5, ["A=1"]))
        self.assertEqual(parse("exec", "h", "uname").words, ["uname"])
        self.assertEqual((parse("exec", "h", "--no-shell", "--", "ls").shell), "")
        self.assertEqual((parse("exec", "h", "--shell", "/bin/sh", "--", "ls").shell), "/bin/sh")
        self.assertIsNone(parse("exec", "h", "--", "ls").shell)
        self.assertEqual(parse("exec", "h", "--umask", "27", "--", "ls").umask, "0027")
        self.assertEqual(parse("list", "--", "g").group, "g")

    def test_exec_usage_errors(self) -> None:
        """No command, a bad env entry, an out-of-range uid or both shell options are usage errors."""
        self.assertUsageError("exec", "h")
        self.assertUsageError("exec", "h", "--")
        self.assertUsageError("exec", "h", "--env", "NOEQ", "--", "ls")
        self.assertUsageError("exec", "h", "--uid", "4294967296", "--", "ls")
        self.assertUsageError("exec", "h", "--shell", "/bin/sh", "--no-shell", "--", "ls")
        self.assertUsageError("exec", "h", "--umask", "9", "--", "ls")

    def test_cp_and_fs(self) -> None:
        """cp needs exactly one HOST:PATH side; fs commands take HOST PATH and their flags."""
        options = parse("cp", "./a", "demo-1:/srv/a")
        self.assertEqual((options.source.host, options.destination), (None, copying.Location("demo-1", "/srv/a")))
        self.assertUsageError("cp", "a", "b")
        self.assertUsageError("cp", "h:a", "h:b")
        options = parse("fs", "mkdir", "-p", "--mode", "700", "demo-1", "/x")
        self.assertEqual((options.hostname, options.path, options.parents, options.mode), ("demo-1", "/x", True, "0700"))
        self.assertTrue(parse("fs", "rm", "-r", "h", "/x").recursive)
        self.assertTrue(parse("fs", "ls", "h", "/", "--json").json)
        self.assertUsageError("fs", "ls", "h")
        self.assertUsageError("fs", "chmod", "h", "/x")

    def test_watch(self) -> None:
        """watch takes HOST and paths, repeatable patterns and checked event types, limits and durations."""
        options = parse("watch", "demo-1", "/srv", "~/x", "--pattern", "*.py", "--pattern", "*.md", "--event",
                        "create", "-r", "--one-shot", "--max-events", "3", "--timeout", "30s", "--debounce", "200ms",
                        "--uid", "1000", "--json")
        self.assertEqual((options.hostname, options.paths, options.patterns, options.events, options.recursive,
                          options.one_shot, options.max_events, options.timeout, options.debounce, options.uid,
                          options.json),
                         ("demo-1", ["/srv", "~/x"], ["*.py", "*.md"], ["create"], True, True, 3, "30s", "200ms",
                          1000, True))
        options = parse("watch", "h", "/")
        self.assertEqual((options.patterns, options.events, options.recursive, options.timeout), (None, None, False,
                                                                                                  None))
        self.assertUsageError("watch", "h")
        self.assertUsageError("watch", "h", "/x", "--event", "open")
        self.assertUsageError("watch", "h", "/x", "--max-events", "0")
        self.assertUsageError("watch", "h", "/x", "--timeout", "soon")

    def test_events(self) -> None:
        """events: --follow, --hostgroup, --tag, --since (default 0: everything held), --json."""
        options = parse("events", "-f", "--hostgroup", "demo", "--tag", "ci", "--since", "41", "--json")
        self.assertEqual((options.follow, options.hostgroup, options.tag, options.since, options.json),
                         (True, "demo", "ci", 41, True))
        options = parse("events")
        self.assertEqual((options.follow, options.hostgroup, options.tag, options.since), (False, None, None, 0))
        self.assertUsageError("events", "--since", "-1")
        self.assertUsageError("events", "demo-1")

    def test_exit_status(self) -> None:
        """The exit status is the command's, an error record never 0, out-of-range codes 255."""
        self.assertEqual(exit_status(ExecRecord("exit", exit_code=3)), 3)
        self.assertEqual(exit_status(ExecRecord("exit", exit_code=143, signal="SIGTERM")), 143)
        self.assertEqual(exit_status(ExecRecord("error", exit_code=127)), 127)
        self.assertEqual(exit_status(ExecRecord("error", exit_code=0)), 1)
        self.assertEqual(exit_status(ExecRecord("exit", exit_code=300)), 255)
