"""
Background execs against the real daemon and a real guest: start, list, info,
logs replayed and followed (with a gap after the ring evicted frames), kill
with escalation, wait-exit, delete, the errors; and survival of the process
and its log across a daemon ``kill -9`` and a suspend/restore.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from typing import Any
from urllib.parse import urlencode

from tests.integration.daemon import Daemon, SharedGuestTestCase, ensure_image


def start(daemon: Daemon, cmd: str, **query: Any) -> dict[str, Any]:
    """Start ``cmd`` in the background on demo-1; its start answer."""
    status, _, data = daemon.request("POST", "/vm/demo-1/exec?" + urlencode({"background": "true", "cmd": cmd, **query}))
    if status != 201:
        raise AssertionError(f"background start answered {status}: {data!r}")
    return dict(json.loads(data))


def logs(daemon: Daemon, exec_id: str, **query: Any) -> list[dict[str, Any]]:
    """The NDJSON frames of a logs request (which must end by itself)."""
    path = f"/vm/demo-1/exec/{exec_id}/logs"
    if query:
        path += "?" + urlencode(query)
    status, headers, data = daemon.request("GET", path)
    if status != 200:
        raise AssertionError(f"logs answered {status}: {data!r}")
    if headers["content-type"] != "application/x-ndjson":
        raise AssertionError(headers)
    return [json.loads(line) for line in data.splitlines()]


def output(frames: list[dict[str, Any]], kind: str = "stdout") -> bytes:
    return b"".join(base64.b64decode(f["data"]) for f in frames if f["type"] == kind)


def wait_exit(daemon: Daemon, exec_id: str, timeout: int = 60) -> dict[str, Any]:
    return dict(daemon.json("GET", f"/vm/demo-1/exec/{exec_id}/wait-exit?timeout={timeout}"))


def error_code(data: bytes) -> str:
    return str(json.loads(data)["code"])


class BackgroundTests(SharedGuestTestCase):
    """One daemon and one booted node for the background exec calls."""

    def test_start_logs_wait_delete(self) -> None:
        """
        A background exec answers 201 with its id at once, runs on its own, and
        its log replays stdout and stderr in order with ids from 1, the exit
        last; info and the list show it; delete is 409 while it runs, then 200,
        then 410.
        """
        daemon = self.daemon
        # It runs until the test lets it go (not for a fixed time: a busy machine may take seconds to list it).
        go = f"/tmp/go-{os.getpid()}-{time.monotonic_ns()}"
        started = start(daemon, f"echo one; echo two >&2; while [ ! -e {go} ]; do sleep 0.1; done; echo three; exit 4",
                        ring_bytes="4096")
        exec_id = started["exec_id"]
        self.assertRegex(exec_id, r"^ex_[0-9a-f]{24}$")
        self.assertEqual(started["ring_bytes"], 4096)
        self.assertIsInstance(started["pid"], int)
        self.assertRegex(started["started_at"], r"^\d{4}-\d\d-\d\dT")
        listed = daemon.json("GET", "/vm/demo-1/exec")
        self.assertIn(exec_id, [e["exec_id"] for e in listed])
        status, _, data = daemon.request("DELETE", f"/vm/demo-1/exec/{exec_id}")
        self.assertEqual((status, error_code(data)), (409, "exec_running"))
        self.assertEqual(daemon.run("demo-1", f"touch {go}")[0], 0)
        done = wait_exit(daemon, exec_id)
        self.assertEqual((done["running"], done["timed_out"], done["exit_code"]), (False, False, 4))
        frames = logs(daemon, exec_id)
        self.assertEqual([f["id"] for f in frames], list(range(1, len(frames) + 1)))
        self.assertEqual((output(frames), output(frames, "stderr")), (b"one\nthree\n", b"two\n"))
        self.assertEqual((frames[-1]["type"], frames[-1]["exit_code"]), ("exit", 4))
        for frame in frames[:-1]:
            self.assertEqual((frame["encoding"], frame[frame["type"]]), ("base64", frame["data"]))
        info = daemon.json("GET", f"/vm/demo-1/exec/{exec_id}")
        self.assertEqual((info["running"], info["exit_code"], info["bytes_written"]), (False, 4, 14))
        self.assertEqual((info["next_id"], info["bytes_dropped"], info["cwd"]), (len(frames) + 1, 0, "/root"))
        self.assertIn("ended_at", info)
        # Replay from a given id, as a client resuming after frame 1.
        self.assertEqual([f["id"] for f in logs(daemon, exec_id, from_id=2)], [f["id"] for f in frames[1:]])
        self.assertEqual(daemon.json("DELETE", f"/vm/demo-1/exec/{exec_id}"), {"exec_id": exec_id, "reaped": True})
        for method, suffix in (("GET", ""), ("DELETE", ""), ("GET", "/logs"), ("POST", "/kill")):
            status, _, data = daemon.request(method, f"/vm/demo-1/exec/{exec_id}{suffix}")
            self.assertEqual((status, error_code(data)), (410, "exec_deleted"), (method, suffix))
        self.assertNotIn(exec_id, [e["exec_id"] for e in daemon.json("GET", "/vm/demo-1/exec")])

    def test_follow_gets_output_as_it_comes(self) -> None:
        """logs?follow=true streams frames as the process writes them and closes after exit."""
        daemon = self.daemon
        exec_id = start(daemon, "for i in 1 2 3; do echo tick $i; sleep 0.5; done")["exec_id"]
        began = time.monotonic()
        frames = logs(daemon, exec_id, follow="true")
        self.assertGreater(time.monotonic() - began, 0.8)
        self.assertEqual(output(frames), b"tick 1\ntick 2\ntick 3\n")
        self.assertEqual(frames[-1]["type"], "exit")
        daemon.json("DELETE", f"/vm/demo-1/exec/{exec_id}")

    def test_ring_evicts_and_gap(self) -> None:
        """
        Output goes on being captured with nobody following; a ring smaller than
        the output keeps its end, and a replay from an evicted id starts with a
        gap frame saying how much was dropped.
        """
        daemon = self.daemon
        exec_id = start(daemon, "for i in $(seq 1 200); do printf '%04d' $i; sleep 0.002; done", ring_bytes="100")["exec_id"]
        self.assertEqual(wait_exit(daemon, exec_id)["exit_code"], 0)
        info = daemon.json("GET", f"/vm/demo-1/exec/{exec_id}")
        self.assertEqual(info["bytes_written"], 800)
        self.assertGreaterEqual(info["bytes_dropped"], 700)
        frames = logs(daemon, exec_id, from_id=1)
        self.assertEqual(frames[0]["type"], "gap")
        self.assertGreater(frames[0]["dropped_frames"], 0)
        self.assertEqual(frames[0]["dropped_bytes"], info["bytes_dropped"])
        self.assertIn("dropped", frames[0]["message"])
        self.assertNotIn("id", frames[0])
        kept = output(frames)
        self.assertTrue(b"01990200".endswith(kept[-8:]) and len(kept) <= 100, kept)
        self.assertEqual(frames[-1]["type"], "exit")
        # from_id=0 is the oldest kept: no gap.
        self.assertEqual(logs(daemon, exec_id, from_id=0)[0]["type"], "stdout")
        daemon.json("DELETE", f"/vm/demo-1/exec/{exec_id}")

    def test_kill_escalates(self) -> None:
        """A process that ignores TERM is killed with KILL after the grace period; kill after the end is a no-op."""
        daemon = self.daemon
        exec_id = start(daemon, "trap '' TERM; echo ready; while true; do sleep 0.2; done")["exec_id"]
        daemon.wait_for("the trap", lambda: output(logs(daemon, exec_id)) == b"ready\n", 30)
        killed = daemon.json("POST", f"/vm/demo-1/exec/{exec_id}/kill", {"signal": "TERM", "grace_ms": 500})
        self.assertEqual((killed["exec_id"], killed["running"], killed["signal_sent"]), (exec_id, True, "TERM"))
        done = wait_exit(daemon, exec_id, 30)
        self.assertEqual((done["exit_code"], done["signal"]), (137, "SIGKILL"))
        again = daemon.json("POST", f"/vm/demo-1/exec/{exec_id}/kill")
        self.assertEqual((again["running"], again["signal_sent"]), (False, ""))
        # The default (no body): TERM, which a plain sleep obeys.
        other = start(daemon, "sleep 100")["exec_id"]
        self.assertEqual(daemon.json("POST", f"/vm/demo-1/exec/{other}/kill")["signal_sent"], "TERM")
        self.assertEqual(wait_exit(daemon, other, 30)["signal"], "SIGTERM")
        for exec_id in (exec_id, other):
            daemon.json("DELETE", f"/vm/demo-1/exec/{exec_id}")

    def test_wait_times_out(self) -> None:
        """wait-exit answers 200 with timed_out when the exec outlives the timeout."""
        daemon = self.daemon
        exec_id = start(daemon, "sleep 30")["exec_id"]
        began = time.monotonic()
        done = wait_exit(daemon, exec_id, 1)
        self.assertGreaterEqual(time.monotonic() - began, 0.9)
        self.assertEqual((done["running"], done["timed_out"]), (True, True))
        self.assertNotIn("exit_code", done)
        daemon.json("POST", f"/vm/demo-1/exec/{exec_id}/kill", {"signal": "KILL"})
        self.assertEqual(wait_exit(daemon, exec_id)["signal"], "SIGKILL")
        daemon.json("DELETE", f"/vm/demo-1/exec/{exec_id}")

    def test_errors(self) -> None:
        """Unknown ids are 404, bad ids and bad input 400, and a program that does not exist is refused."""
        daemon = self.daemon
        for method, suffix in (("GET", ""), ("GET", "/logs"), ("POST", "/kill"), ("GET", "/wait-exit"), ("DELETE", "")):
            status, _, data = daemon.request(method, f"/vm/demo-1/exec/ex_000000000000000000000000{suffix}")
            self.assertEqual((status, error_code(data)), (404, "not_found"), (method, suffix))
        status, _, data = daemon.request("GET", "/vm/demo-1/exec/no.such")
        self.assertEqual((status, error_code(data)), (400, "invalid_path"))
        status, _, data = daemon.request("GET", "/vm/nosuch-1/exec")
        self.assertEqual(status, 404)
        for query in ("background=true&cmd=x&stdin=true", "background=true&cmd=x&buffered=true",
                      "background=true&cmd=x&ring_bytes=0", "background=true"):
            status, _, data = daemon.request("POST", "/vm/demo-1/exec?" + query)
            self.assertEqual((status, error_code(data)), (400, "invalid_query"), query)
        status, _, data = daemon.request("POST", "/vm/demo-1/exec?background=true&shell=&cmd=/no/such")
        self.assertEqual((status, error_code(data)), (400, "invalid_exec"), data)
        exec_id = start(daemon, "sleep 100")["exec_id"]
        for body in ({"signal": "BOGUS"}, {"grace_ms": -1}, {"other": 1}):
            status, _, data = daemon.request("POST", f"/vm/demo-1/exec/{exec_id}/kill", body)
            self.assertEqual(status, 400, body)
        for query in ("timeout=x", "timeout=-1"):
            self.assertEqual(daemon.request("GET", f"/vm/demo-1/exec/{exec_id}/wait-exit?{query}")[0], 400)
        self.assertEqual(daemon.request("GET", f"/vm/demo-1/exec/{exec_id}/logs?from_id=-1")[0], 400)
        daemon.json("POST", f"/vm/demo-1/exec/{exec_id}/kill", {"signal": "KILL"})
        wait_exit(daemon, exec_id)
        daemon.json("DELETE", f"/vm/demo-1/exec/{exec_id}")


class SurvivalTests(SharedGuestTestCase):
    """A background exec and its log outlive the daemon and a suspend."""

    def test_daemon_kill_9_and_suspend_restore(self) -> None:
        """
        The process keeps running and its output keeps being captured while the
        daemon is killed with -9 and restarted, and while the node is suspended
        to disk and restored; its log is whole afterwards.
        """
        daemon = self.daemon
        exec_id = start(daemon, "i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo line $i; sleep 0.1; done")["exec_id"]
        daemon.wait_for("output", lambda: b"line 3\n" in output(logs(daemon, exec_id)), 30)
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        time.sleep(1)
        daemon.start()
        daemon.wait_for("the adopted agent", lambda: daemon.request("HEAD", "/vm/demo-1/health")[0] == 200, 60)
        info = daemon.json("GET", f"/vm/demo-1/exec/{exec_id}")
        self.assertTrue(info["running"])
        before = output(logs(daemon, exec_id))
        self.assertIn(b"line 3\n", before)
        self.assertIn(b"suspended", daemon.request("POST", "/vm/demo-1/suspend")[2])
        status, _, data = daemon.request("POST", "/vm/demo-1/restore?wait=agent&timeout=60s")
        self.assertEqual(status, 200, data)
        daemon.wait_for("more output", lambda: len(output(logs(daemon, exec_id))) > len(before), 30)
        self.assertTrue(daemon.json("GET", f"/vm/demo-1/exec/{exec_id}")["running"])
        daemon.json("POST", f"/vm/demo-1/exec/{exec_id}/kill", {"signal": "KILL"})
        wait_exit(daemon, exec_id)
        text = output(logs(daemon, exec_id)).decode()
        numbers = [int(line.split()[1]) for line in text.splitlines()]
        self.assertEqual(numbers, list(range(1, len(numbers) + 1)))
        daemon.json("DELETE", f"/vm/demo-1/exec/{exec_id}")


__all__ = ["BackgroundTests", "SurvivalTests", "ensure_image"]
