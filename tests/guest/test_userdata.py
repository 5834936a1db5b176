# -*- test-case-name: tests.guest.test_userdata -*-
"""
The guest's ``userdata`` operation (:class:`~vmservice.guest.userdata.UserdataHandler`)
through a real session, with its files in a temporary directory, a fake runner
and a fake clock for the loop's timers.  The runner itself runs a real shell in
``tests.integration.guest.test_userdata``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest.context import AgentContext
from vmservice.guest.health import HealthHandler
from vmservice.guest.userdata_marker import read_userdata_marker
from vmservice.guest.userdata import POLL_INTERVAL, Userdata, UserdataHandler, write_marker
from vmservice.wire import ResetCode
from vmservice.wire.events import Data, HalfClose, Open, Reset


class UserdataTests(GuestSessionMixin, SynchronousTestCase):
    """``{"op": "userdata", "size": N}`` with the script as the body."""

    def setUp(self) -> None:
        base = tempfile.mkdtemp(dir="/tmp")
        self.addCleanup(shutil.rmtree, base)
        self.now = 100.0
        self.spawned: list[list[str]] = []
        self.files = Userdata(marker=os.path.join(base, "lib", "userdata.json"), script=os.path.join(base, "run", "u.sh"),
                              log=os.path.join(base, "log", "userdata.log"), console=None, boot="boot-1")
        self.handler = type("Handler", (UserdataHandler,), {"files": self.files, "spawn": self.spawned.append})
        context = AgentContext("t", 0, set_realtime_ns=lambda ns: None, userdata_marker=self.files.marker)
        self.start_session({"userdata": self.handler, "health": HealthHandler}, context=context, clock=lambda: self.now)
        self.handshake()

    def ask(self, script: bytes) -> int:
        stream_id = self.host.next_stream_id()
        events: list[Any] = [Open(stream_id, {"op": "userdata", "size": len(script)})]
        if script:
            events.append(Data(stream_id, script))
        self.send(*events, HalfClose(stream_id))
        return stream_id

    def answer(self) -> Any:
        data, end = self.receive()
        assert isinstance(data, Data)
        self.assertIsInstance(end, HalfClose)
        return json.loads(data.data)

    def health(self) -> Any:
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "health"}), HalfClose(stream_id))
        data, _ = self.receive()
        assert isinstance(data, Data)
        return json.loads(data.data)

    def tick(self) -> None:
        self.now += POLL_INTERVAL
        self.loop.run_once(0)

    def test_runs_once_and_answers_when_over(self) -> None:
        """
        The script is written (0700), the marker says running, the runner is started with the files;
        the answer comes once the marker says finished; health follows the marker.
        """
        self.assertFalse(self.health()["userdata_ran"])
        self.ask(b"echo hello\n")
        [argv] = self.spawned
        self.assertEqual(argv[-4:], [self.files.marker, self.files.script, self.files.log, ""])
        with open(self.files.script, "rb") as stream:
            self.assertEqual(stream.read(), b"echo hello\n")
        self.assertEqual(os.stat(self.files.script).st_mode & 0o777, 0o700)
        marker = read_userdata_marker(self.files.marker)
        assert marker is not None
        self.assertEqual((marker["state"], marker["boot_id"]), ("running", "boot-1"))
        self.tick()
        self.assertEqual(self.receive(), [])
        self.assertFalse(self.health()["userdata_ran"])
        write_marker(self.files.marker, dict(marker, state="finished", exit_code=3))
        self.tick()
        self.assertEqual(self.answer(), {"state": "finished", "exit_code": 3, "ran_script": True})
        health = self.health()
        self.assertEqual((health["userdata_ran"], health["userdata_exit_code"]), (True, 3))
        # Asked again (a reboot, a reconnected daemon): answered at once, never run again.
        self.ask(b"echo hello\n")
        self.assertEqual(self.answer(), {"state": "finished", "exit_code": 3, "ran_script": True})
        self.assertEqual(len(self.spawned), 1)

    def test_no_script(self) -> None:
        """Without a script nothing runs; the marker says finished without exit code."""
        self.ask(b"")
        self.assertEqual(self.answer(), {"state": "finished", "exit_code": None, "ran_script": False})
        self.assertEqual(self.spawned, [])
        health = self.health()
        self.assertTrue(health["userdata_ran"])
        self.assertNotIn("userdata_exit_code", health)

    def test_interrupted_by_a_reboot(self) -> None:
        """A marker left running by another boot becomes interrupted: no exit code, and no second run."""
        write_marker(self.files.marker, {"state": "running", "boot_id": "boot-0", "ran_script": True})
        self.ask(b"echo again\n")
        self.assertEqual(self.answer(), {"state": "interrupted", "exit_code": None, "ran_script": True})
        self.assertEqual(self.spawned, [])
        marker = read_userdata_marker(self.files.marker)
        assert marker is not None
        self.assertEqual(marker["state"], "interrupted")
        self.assertTrue(self.health()["userdata_ran"])

    def test_running_in_this_boot(self) -> None:
        """A script this boot started (the agent restarted meanwhile) is waited for, not started again."""
        write_marker(self.files.marker, {"state": "running", "boot_id": "boot-1", "ran_script": True})
        self.ask(b"echo x\n")
        self.tick()
        self.assertEqual(self.receive(), [])
        write_marker(self.files.marker, {"state": "finished", "exit_code": 0, "boot_id": "boot-1", "ran_script": True})
        self.tick()
        self.assertEqual(self.answer()["exit_code"], 0)
        self.assertEqual(self.spawned, [])

    def test_host_gone_while_waiting(self) -> None:
        """A host that resets the stream while userdata runs stops the polling; userdata carries on."""
        stream_id = self.ask(b"sleep 100\n")
        self.send(Reset(stream_id, ResetCode.CANCEL, ""))
        self.receive()
        self.tick()
        self.assertEqual(self.receive(), [])
        self.assertEqual(self.loop._timers, [])  # type: ignore[attr-defined]

    def test_bad_size(self) -> None:
        """A size that is missing, not an integer, too large or not the body's resets with BAD_HEADER."""
        for header in ({"op": "userdata"}, {"op": "userdata", "size": "3"}, {"op": "userdata", "size": 10**9},
                       {"op": "userdata", "size": True}, {"op": "userdata", "size": -1}):
            stream_id = self.host.next_stream_id()
            self.send(Open(stream_id, header), HalfClose(stream_id))
            [reset] = self.receive()
            assert isinstance(reset, Reset)
            self.assertEqual((reset.code, reset.reason), (ResetCode.BAD_HEADER, "size must be an integer from 0 to 524288"))
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "userdata", "size": 5}), Data(stream_id, b"ab"), HalfClose(stream_id))
        [reset] = self.receive()
        assert isinstance(reset, Reset)
        self.assertEqual((reset.code, reset.reason), (ResetCode.BAD_HEADER, "the body is not 'size' bytes long"))
        self.assertEqual(self.spawned, [])
        self.assertIsNone(read_userdata_marker(self.files.marker))
