"""
``vmctl exec`` and ``vmctl fs`` run as real subprocesses against the real
daemon and a real guest: the command's exit status (codes, signals, a
command that cannot start, errors before the stream), byte-exact output,
stdin streamed from a pipe and from a file with a sha256 check in the guest,
the file-system commands with their errors, and ``vmctl watch``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from typing import Any

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image

#: How much stdin is streamed through the pipe (random, so nothing compresses).
STDIN_BYTES = 32 * 1024 * 1024


class CliTests(SharedDaemonTestCase):
    """One daemon and one booted node for every vmctl test."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon()
        cls.daemon.start()
        cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)

    def command(self, *argv: str) -> list[str]:
        return [sys.executable, "-m", "vmservice.cli.main", "--url", f"http://127.0.0.1:{self.daemon.port}", *argv]

    def vmctl(self, *argv: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        """Run vmctl to its end, stdout and stderr captured as bytes."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(self.command(*argv), capture_output=True, timeout=300, **kwargs)

    def test_exit_status(self) -> None:
        """vmctl exec exits with the command's status, and prints its stdout and stderr where they belong."""
        result = self.vmctl("exec", "demo-1", "--", "echo out; echo err >&2; exit 3")
        self.assertEqual((result.returncode, result.stdout, result.stderr), (3, b"out\n", b"err\n"))
        self.assertEqual(self.vmctl("exec", "demo-1", "--", "true").returncode, 0)

    def test_bytes_exact(self) -> None:
        """Output that is not UTF-8 arrives byte for byte."""
        result = self.vmctl("exec", "demo-1", "--", r"printf 'A\377\376\000B'")
        self.assertEqual((result.returncode, result.stdout), (0, b"A\xff\xfe\x00B"))

    def test_args_and_options(self) -> None:
        """Words after CMD, --env, --cwd, --uid/--gid, --umask and --no-shell reach the process."""
        result = self.vmctl(
            "exec", "demo-1", "--env", "FOO=a b", "--cwd", "/tmp", "--uid", "65534", "--gid", "65534",
            "--umask", "027", "--", 'printf "%s|" "$FOO" "$(pwd)" "$(id -u)" "$(umask)"', "-- x", "it's",
        )
        self.assertEqual(result.stdout, b"a b|/tmp|65534|0027|-- x|it's|")
        result = self.vmctl("exec", "demo-1", "--no-shell", "--", "/bin/echo", "a;b", "$HOME")
        self.assertEqual(result.stdout, b"a;b $HOME\n")

    def test_signal(self) -> None:
        """A command killed by a signal makes vmctl exit with 128 + its number."""
        self.assertEqual(self.vmctl("exec", "demo-1", "--", "kill -KILL $$").returncode, 137)

    def test_cannot_start(self) -> None:
        """A program that does not exist exits 127 with the agent's message on stderr."""
        result = self.vmctl("exec", "demo-1", "--no-shell", "--", "/no/such/program")
        self.assertEqual(result.returncode, 127)
        self.assertIn(b"not found", result.stderr)

    def test_errors_before_stream(self) -> None:
        """An unknown node or a bad cwd exit 1 with one message line; a missing command is a usage error."""
        result = self.vmctl("exec", "ghost-9", "--", "true")
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"(404 node_not_found)", result.stderr)
        result = self.vmctl("exec", "demo-1", "--cwd", "/no/such/dir", "--", "true")
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"(400 ", result.stderr)
        self.assertEqual(self.vmctl("exec", "demo-1").returncode, 2)

    def test_stdin_pipe(self) -> None:
        """Megabytes piped into vmctl exec --stdin stream into sha256sum in the guest and match."""
        data = os.urandom(STDIN_BYTES)
        process = subprocess.Popen(
            self.command("exec", "demo-1", "--stdin", "--", "sha256sum"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.addCleanup(lambda: process.poll() is None and process.kill())
        out, err = process.communicate(data, timeout=600)  # written in pipe-sized pieces as vmctl reads
        self.assertEqual(process.returncode, 0, err)
        self.assertEqual(out.split()[0].decode(), hashlib.sha256(data).hexdigest())

    def test_stdin_file_and_duplex(self) -> None:
        """A regular file as stdin is sent whole; output flows back (cat echoes it exactly)."""
        path = self.mktemp()
        data = os.urandom(3 * 1024 * 1024 + 17)
        with open(path, "wb") as f:
            f.write(data)
        with open(path, "rb") as f:
            result = self.vmctl("exec", "demo-1", "--stdin", "--", "cat", stdin=f)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(hashlib.sha256(result.stdout).hexdigest(), hashlib.sha256(data).hexdigest())

    def test_background(self) -> None:
        """exec --background prints an exec id; ps lists it; logs -f streams its output; kill ends it."""
        started = self.vmctl("exec", "demo-1", "--background", "--ring-bytes", "64K", "--",
                             "echo out; echo err >&2; trap 'echo bye; exit 9' TERM; while true; do sleep 0.1; done")
        self.assertEqual(started.returncode, 0, started.stderr)
        exec_id = started.stdout.decode().strip()
        self.assertRegex(exec_id, r"^ex_[0-9a-f]+$")
        listing = self.vmctl("ps", "demo-1")
        self.assertIn(exec_id, listing.stdout.decode())
        self.assertIn("running", listing.stdout.decode())
        self.daemon.wait_for("the output", lambda: self.vmctl("logs", "demo-1", exec_id).stdout == b"out\n", 30)
        follow = subprocess.Popen(self.command("logs", "demo-1", exec_id, "--follow"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        try:
            killed = self.vmctl("kill", "demo-1", exec_id, "--signal", "TERM")
            self.assertEqual(killed.stdout, f"sent TERM to {exec_id}\n".encode())
            out, err = follow.communicate(timeout=60)
        finally:
            if follow.poll() is None:
                follow.kill()
                follow.wait()
        # TERM goes to the whole group: bash also reports the sleep it killed.
        self.assertEqual((follow.returncode, out, err.splitlines()[0]), (0, b"out\nbye\n", b"err"))
        self.assertIn("exit 9", self.vmctl("ps", "demo-1").stdout.decode())
        self.assertEqual(self.vmctl("kill", "demo-1", exec_id).stdout, f"{exec_id} had already ended\n".encode())
        self.assertEqual(self.vmctl("logs", "demo-1", "ex_000000000000000000000000").returncode, 1)
        self.assertEqual(self.vmctl("exec", "demo-1", "--ring-bytes", "1K", "--", "true").returncode, 1)

    def test_fs(self) -> None:
        """fs mkdir -p, ls, stat and rm -r work; errors exit 1 with the daemon's code."""
        self.assertEqual(self.vmctl("fs", "mkdir", "-p", "--mode", "0750", "demo-1", "/tmp/cli/a/b").returncode, 0)
        self.vmctl("exec", "demo-1", "--", "printf 12345 > /tmp/cli/f; chmod 640 /tmp/cli/f")
        result = self.vmctl("fs", "ls", "demo-1", "/tmp/cli")
        self.assertEqual(result.returncode, 0, result.stderr)
        header, *rows = result.stdout.decode().splitlines()
        self.assertEqual(header.split(), ["MODE", "TYPE", "SIZE", "MODIFIED", "NAME"])
        cells = [(row.split()[0], row.split()[1], row.split()[2], row.split()[-1]) for row in rows]
        self.assertEqual(cells, [("0755", "directory", cells[0][2], "a"), ("0640", "file", "5", "f")])
        result = self.vmctl("fs", "stat", "demo-1", "/tmp/cli/a/b")
        self.assertIn(b"mode      0750\n", result.stdout)
        result = self.vmctl("fs", "rm", "demo-1", "/tmp/cli")
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"(409 directory_not_empty)", result.stderr)
        self.assertEqual(self.vmctl("fs", "rm", "-r", "demo-1", "/tmp/cli").returncode, 0)
        result = self.vmctl("fs", "stat", "demo-1", "/tmp/cli")
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"(404 not_found)", result.stderr)

    def test_watch(self) -> None:
        """vmctl watch prints one line per event and exits 0 once --max-events were printed; a missing path exits 1."""
        self.daemon.run("demo-1", "rm -rf /tmp/cli-watch && mkdir /tmp/cli-watch")
        watcher = subprocess.Popen(self.command("watch", "demo-1", "/tmp/cli-watch", "--event", "create",
                                                "--max-events", "2", "--timeout", "2m"),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(lambda: watcher.poll() is not None or (watcher.kill(), watcher.wait()))
        # The watch is set up once the command has connected: touch new names until it has seen two.
        deadline = time.monotonic() + 120
        number = 0
        while watcher.poll() is None and time.monotonic() < deadline:
            number += 1
            self.daemon.run("demo-1", f"touch /tmp/cli-watch/f{number}")
            time.sleep(0.3)
        out, err = watcher.communicate(timeout=60)
        self.assertEqual(watcher.returncode, 0, err)
        lines = out.decode().splitlines()
        self.assertEqual(len(lines), 2, lines)
        first = int(lines[0].split()[-1].rsplit("f", 1)[1])
        self.assertEqual([line.split()[1:] for line in lines],
                         [["create", f"/tmp/cli-watch/f{first}"], ["create", f"/tmp/cli-watch/f{first + 1}"]])
        result = self.vmctl("watch", "demo-1", "/tmp/cli-watch/missing")
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"(404 not_found)", result.stderr)

    def tree(self) -> str:
        """A local directory with a nested file, an executable and modes of their own."""
        root = self.mktemp()
        os.makedirs(os.path.join(root, "sub", "empty"))
        with open(os.path.join(root, "run.sh"), "wb") as f:
            f.write(b"#!/bin/sh\necho hi\n")
        with open(os.path.join(root, "sub", "blob"), "wb") as f:
            f.write(os.urandom(2 * 1024 * 1024 + 3))
        os.chmod(os.path.join(root, "run.sh"), 0o750)
        os.chmod(os.path.join(root, "sub", "blob"), 0o604)
        os.chmod(os.path.join(root, "sub", "empty"), 0o705)
        return root

    def test_cp_file_round_trip(self) -> None:
        """A file copied up keeps its bytes and mode in the guest, and comes back identical."""
        source = self.mktemp()
        data = os.urandom(8 * 1024 * 1024 + 1)
        with open(source, "wb") as f:
            f.write(data)
        os.chmod(source, 0o640)
        result = self.vmctl("cp", source, "demo-1:/tmp/cp-file")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, b"")  # not a terminal: no progress line
        guest = self.vmctl("exec", "demo-1", "--", "sha256sum /tmp/cp-file; stat -c %a /tmp/cp-file")
        self.assertEqual(guest.stdout.split()[0].decode(), hashlib.sha256(data).hexdigest())
        self.assertEqual(guest.stdout.split()[-1], b"640")
        target = self.mktemp()
        result = self.vmctl("cp", "demo-1:/tmp/cp-file", target)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(target, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), hashlib.sha256(data).hexdigest())
        self.assertEqual(os.stat(target).st_mode & 0o777, 0o640)

    def test_cp_directory_round_trip(self) -> None:
        """A directory goes up as tar and comes back into a new directory with the same files and modes."""
        source = self.tree()
        result = self.vmctl("cp", source, "demo-1:/tmp/cp-dir")
        self.assertEqual(result.returncode, 0, result.stderr)
        guest = self.vmctl("exec", "demo-1", "--", "cd /tmp/cp-dir && stat -c '%n %a' run.sh sub/blob sub/empty")
        self.assertEqual(guest.stdout, b"run.sh 750\nsub/blob 604\nsub/empty 705\n")
        target = os.path.join(self.mktemp(), "back")
        result = self.vmctl("cp", "demo-1:/tmp/cp-dir", target)
        self.assertEqual(result.returncode, 0, result.stderr)
        for relative in ("run.sh", "sub/blob", "sub/empty"):
            before, after = os.stat(os.path.join(source, relative)), os.stat(os.path.join(target, relative))
            self.assertEqual(after.st_mode & 0o7777, before.st_mode & 0o7777, relative)
        with open(os.path.join(source, "sub", "blob"), "rb") as a, open(os.path.join(target, "sub", "blob"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_cp_errors(self) -> None:
        """A missing guest path exits 1 with the daemon's 404 and leaves nothing behind here."""
        target = self.mktemp()
        result = self.vmctl("cp", "demo-1:/no/such/file", target)
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"(404 ", result.stderr)
        self.assertFalse(os.path.exists(target))
