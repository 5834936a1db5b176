"""
Tests for :mod:`vmservice.cli.main`: argument parsing and request building
as pure functions, and whole ``vmctl`` runs in-process against the API app
served on loopback (see :mod:`tests.test_client`).
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.test_client import TOKEN, ExecLoopbackCase, LoopbackApi, _Recorder, serve, until
from vmservice.cli import copying
from vmservice.cli import main as cli
from vmservice.cli.main import _Failed, create_body, exit_status, parse_args, resolve_token, run
from vmservice.client import DEFAULT_URL, ExecRecord
from vmservice.wire.payloads import ERROR, EXIT, STARTED, STDERR, STDOUT, encode_json_record, encode_record


def parse(*argv: str, **environ: str) -> Any:
    return parse_args(argv, environ)


class ParseTests(SynchronousTestCase):
    def assertUsageError(self, *argv: str) -> None:
        stderr = io.StringIO()
        self.patch(cli.sys, "stderr", stderr)
        with self.assertRaises(SystemExit) as raised:
            parse(*argv)
        self.assertEqual(raised.exception.code, 2)
        self.assertIn("usage: vmctl", stderr.getvalue())

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
        self.assertEqual((options.image_dir, options.name, options.force, options.handler), (None, "default", False, None))
        self.assertUsageError("image")
        self.assertUsageError()

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


class VmctlTestCase(TestCase):
    """Runs vmctl against ``self.url`` (set by the subclass's setUp)."""

    url: str

    async def vmctl(self, *argv: str, **environ: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = await run(reactor, ["--url", self.url, *argv], out, err, environ)
        return code, out.getvalue(), err.getvalue()


class RunTestCase(VmctlTestCase):
    """vmctl against the real API on fakes."""

    token: str | None = None

    async def setUp(self) -> None:
        self.loop = LoopbackApi(self.mktemp(), self.token)
        self.h = self.loop.h
        self.url = await self.loop.serve(self)


class RecorderTestCase(VmctlTestCase):
    """vmctl against a server that records requests and answers as told."""

    async def setUp(self) -> None:
        self.server = _Recorder()
        self.url = await serve(self, self.server)


class RunTests(RunTestCase):
    async def test_create_list_logs_delete(self) -> None:
        """A node made with vmctl create is listed in the table, its console printed, and deleted."""
        self.assertEqual(await self.vmctl("create", "demo", "--tag", "t1", "--cpus", "1"), (0, "demo-1\n", ""))
        code, out, err = await self.vmctl("list")
        self.assertEqual((code, err), (0, ""))
        header, row = out.splitlines()
        self.assertEqual(header.split(), ["HOSTNAME", "GROUP", "STATUS", "IP", "CPUS", "RAM", "CREATED", "TAGS"])
        self.assertEqual(row.split()[:6] + row.split()[-1:], ["demo-1", "demo", "Running", "-", "1", "512M", "t1"])
        code, out, _ = await self.vmctl("list", "other")
        self.assertEqual(out.splitlines()[1:], [])
        self.assertEqual(await self.vmctl("logs", "demo-1", "--lines", "2"), (0, "line 29\nline 30\n", ""))
        self.assertEqual(await self.vmctl("delete", "demo", "demo-1"), (0, "node demo-1 deleted\n", ""))
        self.assertEqual((await self.vmctl("list", "--json"))[1], "[]\n")

    async def test_errors(self) -> None:
        """An error answer prints ``vmctl: <message> (<status> <code>)`` on stderr and exits 1."""
        self.assertEqual(
            await self.vmctl("delete", "demo", "demo-7"),
            (1, "", "vmctl: node 'demo-7' not found (404 node_not_found)\n"),
        )
        code, out, err = await self.vmctl("create", "demo", "--cpus", "9")
        self.assertEqual((code, out), (1, ""))
        self.assertRegex(err, r"^vmctl: .*cpus.* \(400 limit_exceeded\)\n$")

    async def test_health(self) -> None:
        """health exits 1 and says so while the agent is silent, 0 and prints the health once it answers."""
        await self.vmctl("create", "demo")
        code, out, err = await self.vmctl("health", "demo-1")
        self.assertEqual((code, err), (1, ""))
        self.assertTrue(out.startswith("demo-1: unhealthy: "), out)
        self.h.agents[-1].ready()
        code, out, err = await self.vmctl("health", "demo-1")
        self.assertEqual((code, err), (0, ""))
        self.assertIn("demo-1: healthy\n", out)
        self.assertIn("agent uptime   5s", out)

    async def test_info_and_groups(self) -> None:
        """info and groups print the daemon's version and the group table."""
        code, out, _ = await self.vmctl("info")
        self.assertEqual(code, 0)
        self.assertIn("version     0.1.0\n", out)
        code, out, _ = await self.vmctl("groups")
        self.assertEqual(out.splitlines()[1].split(), ["demo", "0", "2", "512M", "0", "x86_64"])

    async def test_create_wait_json(self) -> None:
        """create --wait agent --json prints the whole answer once the agent is up."""
        pending = Deferred.fromCoroutine(self.vmctl("create", "other", "--wait", "agent", "--timeout", "30s", "--json"))
        await until(lambda: self.h.agents)
        self.h.agents[-1].ready()
        code, out, _ = await pending
        self.assertEqual(code, 0)
        self.assertIn('"hostname": "other-1"', out)

    async def test_usage_error(self) -> None:
        """A usage error goes to the given stderr with status 2; --help to stdout with 0."""
        code, out, err = await self.vmctl("frobnicate")
        self.assertEqual((code, out), (2, ""))
        self.assertIn("invalid choice", err)
        code, out, err = await self.vmctl("list", "--help")
        self.assertEqual((code, err), (0, ""))
        self.assertIn("--tag-prefix", out)

    async def test_unreachable(self) -> None:
        """A daemon that is not there gives one line naming the URL, and status 1."""
        out, err = io.StringIO(), io.StringIO()
        missing = self.mktemp() + ".sock"
        code = await run(reactor, ["--url", missing, "list"], out, err, {})
        self.assertEqual((code, out.getvalue()), (1, ""))
        self.assertEqual(err.getvalue(), f"vmctl: cannot connect to {missing}: No such file or directory\n")


class AuthRunTests(RunTestCase):
    token = TOKEN

    async def test_token_sources(self) -> None:
        """The token comes from --token, --token-file or $VMSERVICE_TOKEN; without it the answer is 401."""
        code, _, err = await self.vmctl("groups")
        self.assertEqual(code, 1)
        self.assertIn("(401 unauthorized)", err)
        self.assertEqual((await self.vmctl("groups", "--token", TOKEN))[0], 0)
        self.assertEqual((await self.vmctl("groups", VMSERVICE_TOKEN=TOKEN))[0], 0)
        path = self.mktemp()
        with open(path, "w") as f:
            f.write(TOKEN + "\n")
        self.assertEqual((await self.vmctl("--token-file", path, "groups"))[0], 0)
        code, _, err = await self.vmctl("--token-file", path + ".none", "groups")
        self.assertEqual(code, 1)
        self.assertIn("cannot read the token file", err)


class ImageBuildTests(SynchronousTestCase):
    def test_build(self) -> None:
        """image build calls the builder with the directory, name and force flag and prints its progress."""
        import vmservice.images.build as build

        calls: list[tuple[Any, ...]] = []

        def fake_build(image_dir: str, name: str = "default", force: bool = False, out: Any = print) -> None:
            calls.append((image_dir, name, force))
            out("image x: built")

        self.patch(build, "build_image", fake_build)
        out, err = io.StringIO(), io.StringIO()
        code = self.successResultOf(Deferred.fromCoroutine(
            run(None, ["image", "build", "--image-dir", "/tmp/imgs", "--name", "x", "--force"], out, err, {})
        ))
        self.assertEqual((code, out.getvalue(), err.getvalue()), (0, "image x: built\n", ""))
        self.assertEqual(calls, [("/tmp/imgs", "x", True)])

    def test_default_dir_and_failure(self) -> None:
        """Without --image-dir the store's default is used; a BuildError prints one line and exits 1."""
        import vmservice.images.build as build
        from vmservice.images.store import default_image_dir

        seen: list[str] = []

        def failing(image_dir: str, name: str = "default", force: bool = False, out: Any = print) -> None:
            seen.append(image_dir)
            raise build.BuildError("apt failed")

        self.patch(build, "build_image", failing)
        out, err = io.StringIO(), io.StringIO()
        code = self.successResultOf(Deferred.fromCoroutine(run(None, ["image", "build"], out, err, {})))
        self.assertEqual((code, err.getvalue()), (1, "vmctl: apt failed\n"))
        self.assertEqual(seen, [default_image_dir()])
        self.assertTrue(os.path.isabs(seen[0]))


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


class ExecFsParseTests(SynchronousTestCase):
    def assertUsageError(self, *argv: str) -> None:
        self.patch(cli.sys, "stderr", io.StringIO())
        with self.assertRaises(SystemExit) as raised:
            parse(*argv)
        self.assertEqual(raised.exception.code, 2)

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

    def test_exit_status(self) -> None:
        """The exit status is the command's, an error record never 0, out-of-range codes 255."""
        self.assertEqual(exit_status(ExecRecord("exit", exit_code=3)), 3)
        self.assertEqual(exit_status(ExecRecord("exit", exit_code=143, signal="SIGTERM")), 143)
        self.assertEqual(exit_status(ExecRecord("error", exit_code=127)), 127)
        self.assertEqual(exit_status(ExecRecord("error", exit_code=0)), 1)
        self.assertEqual(exit_status(ExecRecord("exit", exit_code=300)), 255)


class ExecRunTests(ExecLoopbackCase):
    """``vmctl exec`` in-process against the exec route and a fake agent (see :class:`ExecLoopbackCase`)."""

    def vmctl(self, *argv: str, stdin: Any = None) -> tuple[Deferred[int], io.TextIOWrapper, io.TextIOWrapper]:
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        code = Deferred.fromCoroutine(run(reactor, ["--url", self.url, *argv], out, err, {}, stdin=stdin))
        return code, out, err

    async def test_output_bytes_and_status(self) -> None:
        """stdout and stderr bytes go to the binary buffers exactly; the status is the command's."""
        code, out, err = self.vmctl("exec", "demo-1", "--", "x")
        stream = await self.stream()
        self.assertEqual(stream.header["cmd"], "x")
        stream.deliver(encode_json_record(STARTED, {"pid": 1}), encode_record(STDOUT, b"\xff\x00o"),
                       encode_record(STDERR, b"\xfee"), encode_json_record(EXIT, {"exit_code": 42, "signal": None}))
        self.assertEqual(await code, 42)
        self.assertEqual((out.buffer.getvalue(), err.buffer.getvalue()), (b"\xff\x00o", b"\xfee"))  # type: ignore[attr-defined]

    async def test_cannot_start(self) -> None:
        """An error record prints its message and exits with its code."""
        code, _, err = self.vmctl("exec", "demo-1", "--no-shell", "--", "/nope")
        stream = await self.stream()
        self.assertEqual(stream.header["shell"], "")
        stream.deliver(encode_json_record(ERROR, {"message": "/nope: not found", "exit_code": 127}))
        self.assertEqual(await code, 127)
        err.flush()
        self.assertEqual(err.buffer.getvalue(), b"vmctl: /nope: not found\n")  # type: ignore[attr-defined]

    async def test_stdin(self) -> None:
        """--stdin streams the given stdin; without --stdin nothing is sent."""
        read_end, write_end = self.pipe()
        os.write(write_end, b"input")
        self.close(write_end)
        code, _, _ = self.vmctl("exec", "demo-1", "--stdin", "--", "cat", stdin=os.fdopen(read_end, "rb", closefd=False))
        stream = await self.stream()
        await until(lambda: stream.half_closed)
        self.assertEqual(bytes(stream.written), b"input")
        stream.deliver(encode_json_record(STARTED, {"pid": 1}), encode_json_record(EXIT, {"exit_code": 0, "signal": None}))
        self.assertEqual(await code, 0)

    async def test_errors_before_stream(self) -> None:
        """An unknown node exits 1 with the error line; --stdin without a stdin is a failure."""
        code, out, err = self.vmctl("exec", "demo-9", "--", "true")
        self.assertEqual(await code, 1)
        err.flush()
        self.assertIn(b"(404 ", err.buffer.getvalue())  # type: ignore[attr-defined]
        code, _, err = self.vmctl("exec", "demo-1", "--stdin", "--", "cat")
        self.assertEqual(await code, 1)

    async def test_interrupted(self) -> None:
        """A stream cut before its exit record exits 255 with a message, after the output so far."""
        code, out, err = self.vmctl("exec", "demo-1", "--", "x")
        stream = await self.stream()
        stream.deliver(encode_json_record(STARTED, {"pid": 1}), encode_record(STDOUT, b"so far"))
        await until(lambda: out.buffer.getvalue() == b"so far")  # type: ignore[attr-defined]
        self.cut_connections()
        self.assertEqual(await code, 255)
        err.flush()
        self.assertIn(b"vmctl: the connection to the daemon was lost", err.buffer.getvalue())  # type: ignore[attr-defined]


class FsRunTests(RecorderTestCase):
    async def test_ls_and_stat(self) -> None:
        """fs ls prints a table of the entries, fs stat a listing; --json the answer."""
        entry = {"name": "hosts", "type": "file", "size": 12, "mtime": "2023-11-14T22:13:20.5Z", "mode": "0644"}
        self.server.body = json.dumps([entry]).encode()
        code, out, _ = await self.vmctl("fs", "ls", "demo-1", "/etc")
        self.assertEqual((code, out.splitlines()[1].split()), (0, ["0644", "file", "12", "2023-11-14", "22:13:20", "hosts"]))
        self.server.body = json.dumps(entry).encode()
        code, out, _ = await self.vmctl("fs", "stat", "demo-1", "/etc/hosts")
        self.assertIn("size      12\n", out)
        self.assertEqual(json.loads((await self.vmctl("fs", "stat", "demo-1", "/etc/hosts", "--json"))[1]), entry)

    async def test_mkdir_rm(self) -> None:
        """fs mkdir and rm print nothing on success and send their flags."""
        self.server.body = b"{}"
        self.assertEqual(await self.vmctl("fs", "mkdir", "-p", "--mode", "0700", "h", "/a"), (0, "", ""))
        self.assertEqual(await self.vmctl("fs", "rm", "-r", "h", "/a"), (0, "", ""))
        self.assertEqual(self.server.bodies[0], b'{"path":"/a","recursive":true,"mode":"0700"}')
        self.assertEqual(self.server.seen[1][1], b"/vm/h/fs/remove?path=%2Fa&recursive=true")
        self.server.status, self.server.body = 409, b'{"error":"not empty","code":"directory_not_empty"}'
        self.assertEqual(await self.vmctl("fs", "rm", "h", "/a"), (1, "", "vmctl: not empty (409 directory_not_empty)\n"))


class LifecycleRunTests(RecorderTestCase):
    """pause, resume, suspend, restore, relaunch, shutdown and reboot against a recording server."""

    async def test_text_replies(self) -> None:
        """Each command POSTs to its route and prints the daemon's text reply with one newline."""
        self.server.content_type = b"text/plain; charset=utf-8"
        self.server.body = b"node demo-1 paused"
        self.assertEqual(await self.vmctl("pause", "demo-1"), (0, "node demo-1 paused\n", ""))
        self.server.body = b"node demo-1 resumed\n"
        self.assertEqual(await self.vmctl("resume", "demo-1"), (0, "node demo-1 resumed\n", ""))
        self.server.body = b"ok\n"
        self.assertEqual(await self.vmctl("suspend", "demo-1"), (0, "ok\n", ""))
        self.assertEqual(await self.vmctl("restore", "demo-1", "--wait", "agent", "--timeout", "90s"), (0, "ok\n", ""))
        self.assertEqual(await self.vmctl("shutdown", "demo-1"), (0, "ok\n", ""))
        self.server.body = b""
        self.assertEqual(await self.vmctl("reboot", "demo-1"), (0, "", ""))
        self.assertEqual(
            [(method, uri) for method, uri, _ in self.server.seen],
            [
                (b"POST", b"/vm/demo-1/pause"),
                (b"POST", b"/vm/demo-1/resume"),
                (b"POST", b"/vm/demo-1/suspend"),
                (b"POST", b"/vm/demo-1/restore?wait=agent&timeout=90s"),
                (b"POST", b"/vm/demo-1/shutdown?action=shutdown"),
                (b"POST", b"/vm/demo-1/shutdown?action=reboot"),
            ],
        )

    async def test_relaunch(self) -> None:
        """relaunch prints the node's hostname, or the whole answer with --json."""
        node = {"hostname": "demo-1", "hostgroup": "demo", "ip": "", "created_at": "2026-11-22T11:40:02Z",
                "arch": "x86_64"}
        self.server.body = json.dumps(node).encode()
        self.assertEqual(await self.vmctl("relaunch", "demo-1", "--wait", "agent", "--timeout", "2m"),
                         (0, "demo-1\n", ""))
        code, out, err = await self.vmctl("relaunch", "demo-1", "--json")
        self.assertEqual((code, json.loads(out), err), (0, node, ""))
        self.assertEqual([uri for _, uri, _ in self.server.seen],
                         [b"/vm/demo-1/relaunch?wait=agent&timeout=2m", b"/vm/demo-1/relaunch"])

    async def test_errors(self) -> None:
        """An error answer prints the usual line on stderr and exits 1."""
        self.server.status, self.server.body = 404, b'{"error":"node \'demo-7\' not found","code":"node_not_found"}'
        for command in ("pause", "resume", "suspend", "restore", "relaunch", "shutdown", "reboot"):
            self.assertEqual(
                await self.vmctl(command, "demo-7"),
                (1, "", "vmctl: node 'demo-7' not found (404 node_not_found)\n"),
                command,
            )
        self.server.status, self.server.body = 408, b'{"error":"the agent did not answer in 1s","code":"wait_timeout"}'
        self.assertEqual(await self.vmctl("restore", "demo-7", "--wait", "agent", "--timeout", "1s"),
                         (1, "", "vmctl: the agent did not answer in 1s (408 wait_timeout)\n"))
