# -*- test-case-name: tests.integration.guest.test_background -*-
"""
The guest's background exec handler with real child processes, run in-process
on the host through a real :class:`~vmservice.guest.agent.Session` and
:class:`~vmservice.guest.agent.Loop`: output captured with nobody reading, a
reader that does not grant credit falls behind and gets a gap, the exec outlives
its streams and the session, kill escalation, wait, delete and the limits.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest import background, background_requests
from vmservice.guest.context import AgentContext
from vmservice.wire.events import Data, HalfClose, Open, Reset
from vmservice.wire.logframes import EXIT, GAP, STDOUT, FrameDecoder, LogFrame
from vmservice.wire.payloads import decode_head


class HandlerTests(GuestSessionMixin, SynchronousTestCase):
    """:class:`BackgroundHandler` in a real session with real children."""

    def setUp(self) -> None:
        self.start_session({"background": background_requests.BackgroundHandler}, AgentContext("t"))
        self.handshake()
        self.registry = background.registry_of(self.loop)
        self.addCleanup(self._kill_leftovers)

    def _kill_leftovers(self) -> None:
        for entry in self.registry.execs.values():
            if entry.running:
                try:
                    os.killpg(entry.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.loop_until(lambda: not entry.running)

    def loop_until(self, done: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError("timed out")
            self.loop.run_once(0.02)

    def open(self, **header: Any) -> int:
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "background", **header}), HalfClose(stream_id))
        return stream_id

    def collect(self, stream_id: int, credit: bool = True, timeout: float = 10.0) -> tuple[bytes, bool]:
        """Run until the stream ends: everything it carried, and whether it was reset."""
        data = bytearray()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.receive():
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                if isinstance(event, Data):
                    data += event.data
                    if credit:
                        self.session.data_received(self.host.acknowledge_received_data(stream_id, len(event.data)))
                elif isinstance(event, HalfClose):
                    return bytes(data), False
                elif isinstance(event, Reset):
                    return bytes(data), True
            self.loop.run_once(0.02)
        raise AssertionError(f"stream {stream_id} did not end: {bytes(data)[:200]!r}")

    def call(self, **header: Any) -> Any:
        data, reset = self.collect(self.open(**header))
        self.assertFalse(reset)
        return json.loads(data)

    def result(self, **header: Any) -> Any:
        reply = self.call(**header)
        self.assertTrue(reply["ok"], reply)
        return reply["result"]

    def logs(self, exec_id: str, **header: Any) -> tuple[dict[str, Any], list[LogFrame]]:
        data, reset = self.collect(self.open(action="logs", exec_id=exec_id, **header))
        self.assertFalse(reset)
        decoded = decode_head(data)
        assert decoded is not None
        head, used = decoded
        return head, list(FrameDecoder().feed(data[used:]))

    def start(self, cmd: str, **header: Any) -> dict[str, Any]:
        return dict(self.result(action="start", cmd=cmd, **header))

    def finish(self, exec_id: str) -> None:
        self.loop_until(lambda: not self.registry.execs[exec_id].running)

    def test_runs_and_replays(self) -> None:
        """Output is captured with nobody reading; the log replays it, ids from 1, exit last."""
        info = self.start("echo a; echo b >&2; exit 3")
        self.assertTrue(info["exec_id"].startswith("ex_"))
        self.finish(info["exec_id"])
        head, frames = self.logs(info["exec_id"])
        self.assertTrue(head["ok"])
        self.assertEqual([f.id for f in frames], list(range(1, len(frames) + 1)))
        self.assertEqual(frames[-1].kind, EXIT)
        self.assertEqual(frames[-1].control(), {"exit_code": 3, "signal": None})
        info = self.result(action="info", exec_id=info["exec_id"])
        self.assertEqual((info["running"], info["exit_code"], info["bytes_written"]), (False, 3, 4))

    def test_leftover_holding_the_pipe(self) -> None:
        """A process left in the background that keeps the output pipe does not keep the exec running."""
        info = self.start("sleep 30 & echo started")
        self.finish(info["exec_id"])
        _, frames = self.logs(info["exec_id"])
        self.assertEqual(frames[0].payload, b"started\n")
        os.killpg(info["pid"], signal.SIGKILL)

    def test_slow_reader_gets_gap(self) -> None:
        """
        A follower that grants no credit does not hold the process back: the ring
        evicts what it has not read, and when it reads again a gap frame says how
        much it missed, exactly.
        """
        info = self.start("head -c 3000000 /dev/zero; sleep 0.3; echo end", ring_bytes=100_000)
        stream_id = self.open(action="logs", exec_id=info["exec_id"], from_id=1, follow=True)
        received = bytearray()
        # Read without granting credit until the process has ended.
        while self.registry.execs[info["exec_id"]].running:
            for event in self.receive():
                if isinstance(event, Data) and event.stream_id == stream_id:
                    received += event.data
            self.loop.run_once(0.02)
        self.session.data_received(self.host.acknowledge_received_data(stream_id, len(received)))
        rest, reset = self.collect(stream_id)
        self.assertFalse(reset)
        data = bytes(received) + rest
        decoded = decode_head(data)
        assert decoded is not None
        frames = list(FrameDecoder().feed(data[decoded[1]:]))
        gaps = [f for f in frames if f.kind == GAP]
        self.assertEqual(len(gaps), 1)
        output = sum(len(f.payload) for f in frames if f.kind == STDOUT)
        self.assertEqual(output + gaps[0].control()["dropped_bytes"], 3000004)
        self.assertEqual(frames[-1].kind, EXIT)

    def test_outlives_its_streams(self) -> None:
        """A reset of the logs stream, or the session going away, leaves the exec running."""
        info = self.start("sleep 0.5; echo done")
        stream_id = self.open(action="logs", exec_id=info["exec_id"], follow=True)
        self.send(Reset(stream_id, 1, "gone"))
        self.session.connection_lost()
        self.assertTrue(self.registry.execs[info["exec_id"]].running)
        self.finish(info["exec_id"])
        self.assertEqual(self.registry.execs[info["exec_id"]].ring.get(1)[0].payload, b"done\n")

    def test_kill_escalates(self) -> None:
        """TERM that is ignored is followed by KILL after the grace period."""
        info = self.start("trap '' TERM; echo ready; sleep 20 & wait; sleep 20")
        entry = self.registry.execs[info["exec_id"]]
        self.loop_until(lambda: entry.ring.written > 0)
        began = time.monotonic()
        killed = self.result(action="kill", exec_id=info["exec_id"], signal="TERM", grace_ms=300)
        self.assertEqual((killed["signal_sent"], killed["running"]), ("TERM", True))
        self.finish(info["exec_id"])
        self.assertGreaterEqual(time.monotonic() - began, 0.25)
        self.assertEqual((entry.exit_code, entry.signal), (137, "SIGKILL"))
        self.assertEqual(self.result(action="kill", exec_id=info["exec_id"])["signal_sent"], "")

    def test_wait(self) -> None:
        """wait answers at the end, or with timed_out after its timeout."""
        info = self.start("sleep 0.3")
        waited = self.result(action="wait", exec_id=info["exec_id"], timeout_ms=50)
        self.assertEqual((waited["running"], waited["timed_out"]), (True, True))
        waited = self.result(action="wait", exec_id=info["exec_id"], timeout_ms=10_000)
        self.assertEqual((waited["running"], waited["timed_out"], waited["exit_code"]), (False, False, 0))

    def test_delete_and_errors(self) -> None:
        """Delete refuses a running exec, then forgets it; a deleted id is gone, an unknown one not found."""
        info = self.start("sleep 0.2")
        exec_id = info["exec_id"]
        self.assertEqual(self.call(action="delete", exec_id=exec_id)["error"], "running")
        self.finish(exec_id)
        self.assertEqual(self.result(action="delete", exec_id=exec_id), {"exec_id": exec_id, "reaped": True})
        self.assertEqual(self.call(action="info", exec_id=exec_id)["error"], "gone")
        self.assertEqual(self.call(action="info", exec_id="ex_nope")["error"], "not_found")
        head, frames = self.logs("ex_nope")
        self.assertEqual((head["ok"], head["error"], frames), (False, "not_found", []))
        self.assertEqual(self.call(action="what")["error"], "invalid")
        for bad in ({"ring_bytes": 0}, {"ring_bytes": True}, {"cmd": ""}):
            self.assertEqual(self.call(action="start", **{"cmd": "true", **bad})["error"], "invalid", bad)
        self.assertEqual(self.call(action="start", cmd="/no/such", shell="")["error"], "rejected")
        self.assertEqual(self.call(action="start", cmd="true", cwd="/no/such")["error"], "rejected")

    def test_limit(self) -> None:
        """The registry keeps at most MAX_EXECS execs; deleting ended ones makes room."""
        self.patch(background, "MAX_EXECS", 2)
        first = self.start("true")
        self.start("true")
        self.assertEqual(self.call(action="start", cmd="true")["error"], "busy")
        self.finish(first["exec_id"])
        self.result(action="delete", exec_id=first["exec_id"])
        self.start("true")
        self.assertEqual(len(self.result(action="list")), 2)
