"""
``POST /vm/{hostname}/exec`` against the real daemon and a real guest: every
query parameter, both stdio modes with bytes that are not UTF-8, exit codes and
signals, 64 MiB of stdin streamed into ``sha256sum``, full duplex, a client that
disconnects (its process group dies), concurrent execs and the errors.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
import time
from typing import Any, Iterator
from urllib.parse import urlencode

from tests.integration.daemon import SharedGuestTestCase


class RawExec:
    """
    One exec over a raw socket, so a test can send the body while it reads the
    response (full duplex), or hang up in the middle.
    """

    def __init__(self, port: int, query: list[tuple[str, str]], host: str = "demo-1", body: bool = False) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        head = f"POST /vm/{host}/exec?{urlencode(query)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if body:
            head += "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n"
        else:
            head += "Content-Length: 0\r\n"
        self.sock.sendall(head.encode() + b"\r\n")
        self.reader = self.sock.makefile("rb")
        self.status = 0
        self.headers: dict[str, str] = {}

    def send(self, data: bytes) -> None:
        """One chunk of the body."""
        self.sock.sendall(b"%x\r\n" % len(data) + data + b"\r\n")

    def end(self) -> None:
        """The last chunk."""
        self.sock.sendall(b"0\r\n\r\n")

    def read_head(self) -> None:
        line = self.reader.readline()
        self.status = int(line.split()[1])
        while True:
            line = self.reader.readline()
            if line in (b"\r\n", b""):
                return
            name, _, value = line.decode().partition(":")
            self.headers[name.strip().lower()] = value.strip()

    def lines(self) -> Iterator[bytes]:
        """The response body's lines, as they arrive (chunked encoding)."""
        if not self.status:
            self.read_head()
        pending = b""
        while True:
            size = int(self.reader.readline().strip(), 16)
            if size == 0:
                self.reader.readline()
                break
            pending += self.reader.read(size)
            self.reader.read(2)
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                yield line
        if pending:
            yield pending

    def records(self) -> Iterator[dict[str, Any]]:
        for line in self.lines():
            yield json.loads(line)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class ExecTests(SharedGuestTestCase):
    """One daemon and one booted node for every exec test."""


    def exec(self, query: list[tuple[str, str]], host: str = "demo-1", body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": "application/octet-stream"} if body is not None else {}
        return self.daemon.request("POST", f"/vm/{host}/exec?{urlencode(query)}", body, headers=headers)

    def records(self, query: list[tuple[str, str]], body: bytes | None = None) -> list[dict[str, Any]]:
        status, headers, data = self.exec(query, body=body)
        self.assertEqual(status, 200, data)
        self.assertEqual(headers["content-type"], "application/x-ndjson")
        self.assertTrue(data.endswith(b"\n"))
        lines = data.split(b"\n")[:-1]
        self.assertNotIn(b"", lines)
        return [json.loads(line) for line in lines]

    def output(self, records: list[dict[str, Any]], kind: str = "stdout") -> bytes:
        parts = [r for r in records if r["type"] == kind]
        return b"".join(
            base64.b64decode(r["data"]) if r.get("encoding") == "base64" else r["data"].encode() for r in parts
        )

    def run_buffered(self, query: list[tuple[str, str]]) -> dict[str, Any]:
        status, _, data = self.exec(query + [("buffered", "true")])
        self.assertEqual(status, 200, data)
        return json.loads(data)

    def test_stream_records(self) -> None:
        """A shell line streams started, stdout, stderr and exit records, exit last, with its exit code."""
        records = self.records([("cmd", "echo hello; echo oops >&2; exit 3")])
        self.assertEqual(records[0]["type"], "started")
        self.assertIsInstance(records[0]["pid"], int)
        self.assertRegex(records[0]["started_at"], r"^\d{4}-\d\d-\d\dT")
        self.assertEqual(records[-1]["type"], "exit")
        self.assertEqual(records[-1]["exit_code"], 3)
        self.assertNotIn("signal", records[-1])
        self.assertIn("ended_at", records[-1])
        self.assertEqual(self.output(records), b"hello\n")
        self.assertEqual(self.output(records, "stderr"), b"oops\n")
        self.assertTrue(all("timestamp" in r and r["pid"] == records[0]["pid"] for r in records))
        # Typed frames carry their payload in data and in the field named after the type.
        self.assertTrue(all(r[r["type"]] == r["data"] for r in records if r["type"] in ("stdout", "stderr")))

    def test_args_env_shell(self) -> None:
        """args are appended as quoted words, env entries reach the process, pipes work in the shell."""
        records = self.records([
            ("cmd", "printf '%s|' \"$FOO\""), ("args", "a b"), ("args", "$HOME"), ("args", "it's"),
            ("env", "FOO=x=y"),
        ])
        self.assertEqual(self.output(records), b"x=y|a b|$HOME|it's|")
        records = self.records([("cmd", "echo abc | tr a-z A-Z")])
        self.assertEqual(self.output(records), b"ABC\n")

    def test_no_shell(self) -> None:
        """An empty shell runs cmd directly, args as argv (no shell interpretation)."""
        records = self.records([("cmd", "/bin/echo"), ("args", "a;b $X"), ("shell", "")])
        self.assertEqual(self.output(records), b"a;b $X\n")
        records = self.records([("cmd", "echo $0"), ("shell", "/bin/sh")])
        self.assertEqual(self.output(records), b"/bin/sh\n")

    def test_default_shell_is_static_bash(self) -> None:
        """
        The default shell runs as the image's statically linked bash, still named /bin/bash, with bash's
        features, and so does /bin/bash run without a shell; /bin/bash itself is the ordinary one.
        """
        records = self.records([("cmd", 'readlink /proc/$$/exe; echo "$0 $BASH $SHELL ${BASH_VERSINFO[0]}"; '
                                        "[[ abc == a* ]] && echo glob; readlink -f /bin/bash")])
        self.assertEqual(self.output(records),
                         b"/usr/bin/bash-static\n/bin/bash /bin/bash /bin/bash 5\nglob\n/usr/bin/bash\n")
        records = self.records([("cmd", "/bin/bash"), ("args", "-l"), ("args", "-c"), ("args", "readlink /proc/$$/exe; true"),
                                ("shell", "")])
        self.assertEqual(self.output(records), b"/usr/bin/bash-static\n")

    def test_identity_cwd_umask(self) -> None:
        """uid, gid, cwd and permissions (the umask) apply; 4294967295 means root; ~ is the home."""
        out = self.output(self.records([
            ("cmd", "id -u; id -g; pwd; umask"), ("uid", "65534"), ("gid", "65534"), ("cwd", "/tmp"),
            ("permissions", "0027"),
        ]))
        self.assertEqual(out, b"65534\n65534\n/tmp\n0027\n")
        out = self.output(self.records([("cmd", "id -u; pwd"), ("uid", "4294967295"), ("gid", "4294967295"), ("cwd", "~")]))
        self.assertEqual(out, b"0\n/root\n")

    def test_stream_selection(self) -> None:
        """stdout=false and stderr=false leave those streams out."""
        records = self.records([("cmd", "echo out; echo err >&2"), ("stdout", "false")])
        self.assertEqual([r["type"] for r in records], ["started", "stderr", "exit"])
        records = self.records([("cmd", "echo out; echo err >&2"), ("stderr", "false")])
        self.assertEqual([r["type"] for r in records], ["started", "stdout", "exit"])

    def test_not_utf8(self) -> None:
        """Invalid UTF-8 becomes U+FFFD in text mode; base64 mode returns the exact bytes with encoding."""
        command = [("cmd", r"printf 'A\377\376\303\251'")]
        records = self.records(command)
        self.assertEqual(self.output(records).decode(), "A\ufffd\ufffd\u00e9")
        self.assertNotIn("encoding", [k for r in records for k in r])
        records = self.records(command + [("stdio", "base64")])
        self.assertEqual(self.output(records), b"A\xff\xfe\xc3\xa9")
        self.assertEqual({r.get("encoding") for r in records if r["type"] == "stdout"}, {"base64"})

    def test_buffered(self) -> None:
        """buffered=true returns one ExecResult, in text or base64."""
        result = self.run_buffered([("cmd", r"printf 'o\377'; echo e >&2; exit 4")])
        self.assertEqual((result["stdout"], result["stderr"], result["exit_code"]), ("o\ufffd", "e\n", 4))
        self.assertIsInstance(result["pid"], int)
        self.assertIn("started_at", result)
        self.assertIn("ended_at", result)
        self.assertNotIn("encoding", result)
        result = self.run_buffered([("cmd", r"printf 'o\377'"), ("stdio", "base64")])
        self.assertEqual((base64.b64decode(result["stdout"]), result["encoding"]), (b"o\xff", "base64"))

    def test_buffered_output_is_capped(self) -> None:
        """
        A buffered exec keeps at most 16 MiB of a stream: past it the process
        group is stopped and the result says so (the daemon's memory is not
        the limit of a command's output).
        """
        self.run_buffered([("cmd", "rm -f /tmp/finished")])
        command = "head -c 41943040 /dev/zero | tr '\\0' a; touch /tmp/finished"
        result = self.run_buffered([("cmd", command)])
        self.assertEqual(len(result["stdout"]), 16 * 1024 * 1024)
        self.assertEqual(set(result["stdout"]), {"a"})
        self.assertEqual(result["exit_code"], 255)
        self.assertIn("stdout passed the 16777216 byte limit", result["error"])
        time.sleep(1)
        check = self.run_buffered([("cmd", "test -e /tmp/finished; echo $?")])
        self.assertEqual(check["stdout"], "1\n")

    def test_signal(self) -> None:
        """A process killed by a signal reports its name and 128 + its number."""
        records = self.records([("cmd", "kill -TERM $$")])
        self.assertEqual((records[-1]["signal"], records[-1]["exit_code"]), ("SIGTERM", 143))

    def test_cannot_start(self) -> None:
        """A program that does not exist is an error record with exit code 127, HTTP 200."""
        records = self.records([("cmd", "/no/such/program"), ("shell", "")])
        self.assertEqual(len(records), 1)
        self.assertEqual((records[0]["type"], records[0]["exit_code"]), ("error", 127))
        self.assertIn("not found", records[0]["error"])
        records = self.records([("cmd", "true"), ("shell", "/no/shell")])
        self.assertEqual((records[0]["type"], records[0]["exit_code"]), ("error", 127))

    def test_bad_input(self) -> None:
        """No cmd, a bad uid, bad booleans, a bad umask and unknown cwds are 400; an unknown VM is 404."""
        for query in (
            [],
            [("cmd", "true"), ("uid", "-1")],
            [("cmd", "true"), ("uid", "4294967296")],
            [("cmd", "true"), ("stdout", "maybe")],
            [("cmd", "true"), ("permissions", "999")],
            [("cmd", "true"), ("env", "NOEQUALS")],
            [("cmd", "true"), ("stdio", "hex")],
            [("cmd", "true"), ("cwd", "/no/such/dir")],
            [("cmd", "true"), ("cwd", "~"), ("uid", "4242")],
        ):
            status, _, data = self.exec(query)
            self.assertEqual(status, 400, (query, data))
            self.assertIn("error", json.loads(data))
        status, _, _ = self.exec([("cmd", "true")], host="demo-99")
        self.assertEqual(status, 404)

    def test_stdin_64_mib(self) -> None:
        """64 MiB streamed as a chunked body reach the process intact (sha256 matches in the guest)."""
        block = hashlib.sha256(b"seed").digest() * 2048  # 64 KiB
        expected = hashlib.sha256()
        call = RawExec(self.daemon.port, [("cmd", "sha256sum"), ("stdin", "true")], body=True)
        try:
            for _ in range(1024):
                call.send(block)
                expected.update(block)
            call.end()
            records = list(call.records())
        finally:
            call.close()
        self.assertEqual(call.status, 200)
        self.assertEqual(records[-1]["exit_code"], 0)
        self.assertEqual(self.output(records).split()[0].decode(), expected.hexdigest())

    def test_full_duplex(self) -> None:
        """Output comes back while the body is still being sent."""
        call = RawExec(self.daemon.port, [("cmd", "while read l; do echo got $l; done"), ("stdin", "true")], body=True)
        try:
            records = call.records()
            self.assertEqual(next(records)["type"], "started")
            for word in ("one", "two"):
                call.send(word.encode() + b"\n")
                self.assertEqual(next(records)["data"], f"got {word}\n")
            call.end()
            rest = list(records)
        finally:
            call.close()
        self.assertEqual(rest[-1]["exit_code"], 0)

    def test_disconnect_kills(self) -> None:
        """A client that hangs up kills the process and its whole group in the guest."""
        call = RawExec(self.daemon.port, [("cmd", "sleep 1001 & echo $!; sleep 1000; wait")])
        try:
            records = call.records()
            pid = next(records)["pid"]
            child = int(next(records)["data"])
        finally:
            call.close()
        deadline = time.monotonic() + 10
        while True:
            out = self.output(self.records([("cmd", f"kill -0 {pid} 2>/dev/null; echo $?; kill -0 {child} 2>/dev/null; echo $?")]))
            if out == b"1\n1\n" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(out, b"1\n1\n")

    def test_leftovers_survive(self) -> None:
        """
        What a command leaves running in the background (``nohup … &``, in its own process group) keeps
        running after the command exits normally, whichever way it was run: streamed, buffered or with stdin.
        """
        ports = {"streamed": 8101, "buffered": 8102, "stdin": 8103}
        line = "nohup python3 -m http.server {} >/dev/null 2>&1 &"
        self.assertEqual(self.records([("cmd", line.format(ports["streamed"]))])[-1]["exit_code"], 0)
        self.assertEqual(self.run_buffered([("cmd", line.format(ports["buffered"]))])["exit_code"], 0)
        records = self.records([("cmd", "read -r port; " + line.format("$port")), ("stdin", "true")],
                               body=b"%d\n" % ports["stdin"])
        self.assertEqual(records[-1]["exit_code"], 0)
        try:
            for mode, port in ports.items():
                deadline = time.monotonic() + 30
                while True:
                    answer = self.run_buffered([("cmd", f"curl -s -o /dev/null -w '%{{http_code}}' localhost:{port}")])
                    if answer["stdout"] == "200" or time.monotonic() > deadline:
                        break
                    time.sleep(0.3)
                self.assertEqual(answer["stdout"], "200", mode)
        finally:
            self.run_buffered([("cmd", "pkill -f 'http.server 810[123]'")])

    def test_usual_commands(self) -> None:
        """The names users type first on a Debian system are there (python3, not only python3.11)."""
        names = "python3 nohup setsid timeout env stdbuf curl wget pgrep pkill ps top free ip less vi"
        result = self.run_buffered([("cmd", f"for c in {names}; do command -v $c >/dev/null || echo $c; done")])
        self.assertEqual(result["stdout"], "")
        self.assertEqual(self.run_buffered([("cmd", "python3 -c 'print(6*7)'")])["stdout"], "42\n")

    def test_concurrent(self) -> None:
        """
        Several execs on one node run at once, each with its own output: each
        waits until all four have started (a barrier of files), which execs run
        one after the other would never pass.
        """
        results: dict[int, bytes] = {}
        barrier = "/tmp/concurrent-barrier"
        self.assertEqual(self.run_buffered([("cmd", f"rm -rf {barrier}; mkdir {barrier}")])["exit_code"], 0)

        def run(i: int) -> None:
            wait = f"touch {barrier}/{i}; until [ $(ls {barrier} | wc -l) -ge 4 ]; do sleep 0.1; done; echo {i}"
            status, _, data = self.exec([("cmd", f"timeout 100 sh -c '{wait}'"), ("buffered", "true")])
            results[i] = json.loads(data)["stdout"].encode() if status == 200 else data

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual(results, {i: f"{i}\n".encode() for i in range(4)})

    def rss(self) -> int:
        """The daemon's resident memory in bytes."""
        return self.daemon.rss()

    def test_slow_reader_slows_the_guest(self) -> None:
        """
        A client that stops reading holds the guest process back instead of
        growing the daemon's memory; all the output still arrives afterwards.
        """
        size = 48 * 1024 * 1024
        call = RawExec(self.daemon.port, [("cmd", f"head -c {size} /dev/zero | tr '\\\\0' a")])
        try:
            records = call.records()
            self.assertEqual(next(records)["type"], "started")
            before = self.rss()
            # Long enough for the guest to push all 48 MiB through the channel
            # (about 8 MB/s here) if nothing held it back.
            time.sleep(10)
            grown = self.rss() - before
            received = 0
            last: dict[str, Any] = {}
            for record in records:
                if record["type"] == "stdout":
                    received += len(record["data"])
                last = record
        finally:
            call.close()
        self.assertLess(grown, 32 * 1024 * 1024)
        self.assertEqual(received, size)
        self.assertEqual((last["type"], last["exit_code"]), ("exit", 0))
