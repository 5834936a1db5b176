# -*- test-case-name: tests.integration.cli.test_main -*-
"""
Tests for :mod:`vmservice.cli.main`: whole ``vmctl`` runs in-process on the
global reactor against the API app served on loopback, a recording server and
the real exec route (see :mod:`tests.integration.test_client`).  Its parsing
and the parts without a server are tested in :mod:`tests.cli.test_main`.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.integration.loopback import (
    TOKEN,
    ExecLoopbackCase,
    LoopbackApi,
    Recorder,
    WatchLoopbackCase,
    serve,
    state_dir,
    until,
)
from vmservice.cli.main import run
from vmservice.wire.payloads import ERROR, EXIT, STARTED, STDERR, STDOUT, encode_json_record, encode_record


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
        self.loop = LoopbackApi(state_dir(self), self.token)
        self.h = self.loop.h
        self.url = await self.loop.serve(self)


class SecretRunTests(RunTestCase):
    async def vmctl_in(self, stdin: bytes, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = await run(reactor, ["--url", self.url, *argv], out, err, {}, io.BytesIO(stdin))
        return code, out.getvalue(), err.getvalue()

    async def test_create_from_file_and_stdin_list_update_rm(self) -> None:
        """Content comes from --file or stdin; list shows metadata; update changes content or attributes; rm deletes."""
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"from-file\n")
        self.assertEqual(await self.vmctl("secret", "create", "db", "--file", path, "--mode", "440", "--uid", "1000"),
                         (0, "", ""))
        self.assertEqual(await self.vmctl_in(b"from-stdin", "secret", "create", "token"), (0, "", ""))
        self.assertEqual(self.loop.secrets.get("db").data, b"from-file\n")
        self.assertEqual(self.loop.secrets.get("token").data, b"from-stdin")
        code, out, _ = await self.vmctl("secret", "list")
        header, first, second = out.splitlines()
        self.assertEqual(header.split(), ["NAME", "SIZE", "MODE", "UID", "GID", "MODIFIED"])
        self.assertEqual(first.split()[:5], ["db", "10", "0440", "1000", "0"])
        self.assertEqual(second.split()[:5], ["token", "10", "0600", "0", "0"])
        self.assertEqual(json.loads((await self.vmctl("secret", "list", "--json"))[1])[0]["name"], "db")
        # Attributes only: stdin is not read.
        self.assertEqual(await self.vmctl_in(b"ignored", "secret", "update", "db", "--mode", "0400"), (0, "", ""))
        self.assertEqual((self.loop.secrets.get("db").data, self.loop.secrets.get("db").meta.permissions),
                         (b"from-file\n", 0o400))
        # No option: the content from stdin.
        self.assertEqual(await self.vmctl_in(b"rotated", "secret", "update", "db"), (0, "", ""))
        self.assertEqual(self.loop.secrets.get("db").data, b"rotated")
        self.assertEqual(await self.vmctl_in(b"x", "secret", "update", "db", "--file", "-", "--uid", "5"), (0, "", ""))
        self.assertEqual((self.loop.secrets.get("db").data, self.loop.secrets.get("db").meta.uid), (b"x", 5))
        self.assertEqual(await self.vmctl("secret", "rm", "db"), (0, "", ""))
        self.assertEqual([m.name for m in self.loop.secrets.list()], ["token"])

    async def test_errors(self) -> None:
        """An error answer or an unreadable file exits 1 with a message; an oversized file is refused before sending."""
        await self.vmctl_in(b"x", "secret", "create", "db")
        code, _, err = await self.vmctl_in(b"y", "secret", "create", "db")
        self.assertEqual(code, 1)
        self.assertIn("409", err)
        code, _, err = await self.vmctl("secret", "rm", "nope")
        self.assertEqual(code, 1)
        self.assertIn("404", err)
        code, _, err = await self.vmctl("secret", "create", "k", "--file", "/nonexistent/file")
        self.assertEqual((code, err), (1, "vmctl: cannot read /nonexistent/file: No such file or directory\n"))
        big = self.mktemp()
        with open(big, "wb") as f:
            f.write(b"\0" * (1024 * 1024 + 1))
        code, _, err = await self.vmctl("secret", "create", "k", "--file", big)
        self.assertEqual(code, 1)
        self.assertIn("more than 1048576 bytes", err)
        self.assertEqual([m.name for m in self.loop.secrets.list()], ["db"])


class RecorderTestCase(VmctlTestCase):
    """vmctl against a server that records requests and answers as told."""

    async def setUp(self) -> None:
        self.server = Recorder()
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
        await self.vmctl("pause", "demo-1")
        code, out, err = await self.vmctl("health", "demo-1")
        self.assertEqual((code, err), (1, ""))
        self.assertEqual(out, "demo-1: unhealthy: node 'demo-1' is paused\n")

    async def test_describe(self) -> None:
        """vmctl describe prints the node's description aligned, or its JSON; an unknown node fails."""
        await self.vmctl("create", "demo", "--tag", "t1")
        code, out, err = await self.vmctl("describe", "demo-1")
        self.assertEqual((code, err), (0, ""))
        lines = {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines()}
        self.assertEqual((lines["hostname"], lines["tags"], lines["storage"], lines["network"]),
                         ("demo-1", "t1", "image", "none"))
        code, out, _ = await self.vmctl("describe", "demo-1", "--json")
        self.assertEqual((code, json.loads(out)["hostname"]), (0, "demo-1"))
        self.assertEqual(await self.vmctl("describe", "demo-9"),
                         (1, "", "vmctl: node 'demo-9' not found (404 node_not_found)\n"))

    async def test_tag(self) -> None:
        """vmctl tag shows the tags, adds and removes in one go (-TAG included), replaces and clears."""
        await self.vmctl("create", "demo", "--tag", "a", "--tag", "b")
        self.assertEqual(await self.vmctl("tag", "demo-1"), (0, "a\nb\n", ""))
        self.assertEqual(await self.vmctl("tag", "demo-1", "+c", "-a"), (0, "b\nc\n", ""))
        self.assertEqual(await self.vmctl("tag", "demo-1", "--", "+-x"), (0, "b\nc\n-x\n", ""))
        self.assertEqual(await self.vmctl("tag", "demo-1", "--", "--x"), (0, "b\nc\n", ""))
        code, out, _ = await self.vmctl("tag", "demo-1", "=z", "=y", "--json")
        self.assertEqual((code, json.loads(out)), (0, {"hostname": "demo-1", "tags": ["z", "y"]}))
        self.assertEqual((await self.vmctl("list", "--tag", "y"))[1].splitlines()[1].split()[0], "demo-1")
        self.assertEqual(await self.vmctl("tag", "demo-1", "="), (0, "", ""))
        self.assertEqual(await self.vmctl("tag", "demo-1", "+a", "-a"),
                         (1, "", "vmctl: tag 'a' is both added and removed (400 invalid_body)\n"))
        self.assertEqual((await self.vmctl("tag", "demo-1", "=a", "+b"))[0], 2)

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


class WatchRunTests(WatchLoopbackCase):
    """``vmctl watch`` in-process against the watch route and a fake agent (see :class:`WatchLoopbackCase`)."""

    def vmctl(self, *argv: str) -> tuple[Deferred[int], io.StringIO, io.StringIO]:
        out, err = io.StringIO(), io.StringIO()
        code = Deferred.fromCoroutine(run(reactor, ["--url", self.url, *argv], out, err, {}))
        return code, out, err

    async def test_lines_until_the_end(self) -> None:
        """Each event is printed as it arrives; the command exits 0 when the daemon ends the stream."""
        code, out, err = self.vmctl("watch", "demo-1", "/srv", "--event", "write", "--pattern", "*.py", "-r",
                                    "--max-events", "2")
        stream = await self.stream()
        self.assertEqual((stream.header["events"], stream.header["patterns"], stream.header["recursive"]),
                         (["write"], ["*.py"], True))
        stream.deliver(self.message(ok=True, result={}), self.event("write", "/srv/a.py"))
        await until(lambda: out.getvalue().endswith("write /srv/a.py\n"))
        stream.deliver(self.event("write", "/srv/b.py"))
        self.assertEqual(await code, 0)
        self.assertEqual([line.split(" ", 1)[1] for line in out.getvalue().splitlines()],
                         ["write /srv/a.py", "write /srv/b.py"])
        self.assertEqual(err.getvalue(), "")

    async def test_missing_path_and_cut(self) -> None:
        """A missing path exits 1 with the error line; a stream cut mid-way exits 1 with a message."""
        code, out, err = self.vmctl("watch", "demo-1", "/nope")
        stream = await self.stream()
        stream.deliver(self.message(ok=False, error="not_found", message="/nope: No such file or directory"))
        self.assertEqual(await code, 1)
        self.assertIn("(404 not_found)", err.getvalue())
        code, out, err = self.vmctl("watch", "demo-1", "/srv", "--json")
        stream = await self.stream(2)
        stream.deliver(self.message(ok=True, result={}), self.event("create", "/srv/a"))
        await until(lambda: bool(out.getvalue()))
        self.assertEqual(json.loads(out.getvalue())["path"], "/srv/a")
        for factory in self.served:  # type: ignore[attr-defined]
            for protocol in list(factory.protocols):
                protocol.transport.abortConnection()
        self.assertEqual(await code, 1)
        self.assertIn("vmctl: the connection to the daemon was lost", err.getvalue())


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
