# -*- test-case-name: tests.guest.test_background_requests -*-
"""
Tests for :mod:`vmservice.guest.background_requests` in a real session: the
refusals of a request's header, in the words and the order the guest has
always answered them (the exec is looked up first, then the fields are read).
Execs that run real processes are in :mod:`tests.integration.guest.test_background`.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest.background import SIGNALS, registry_of
from vmservice.guest.background_requests import BackgroundHandler
from vmservice.guest.context import AgentContext
from vmservice.wire.events import Data, Open
from vmservice.wire.openheaders.background import SIGNAL_NAMES
from vmservice.wire.payloads import decode_head


class _Ended(SimpleNamespace):
    """An exec that has ended, standing in the registry for a real one (only looked up, or deleted)."""

    def delete(self) -> None:
        pass

    def info(self) -> dict[str, Any]:
        return {"exec_id": self.exec_id}


class RefusalTests(GuestSessionMixin, SynchronousTestCase):
    """A bad request gets ``{"ok": false, ...}`` and HALF_CLOSE, the field named."""

    def setUp(self) -> None:
        self.start_session({"background": BackgroundHandler}, AgentContext("t"))
        self.handshake()
        self.registry = registry_of(self.loop)
        self.registry.execs["ex_1"] = _Ended(exec_id="ex_1", running=False)  # type: ignore[assignment]
        self.registry.execs["ex_2"] = _Ended(exec_id="ex_2", running=False)  # type: ignore[assignment]
        self.registry.delete("ex_2")

    def answer(self, header: dict[str, Any]) -> Any:
        """The guest's reply to ``header`` (a logs reply is read from its head)."""
        stream_id = self.host.next_stream_id()
        self.send(Open(stream_id, {"op": "background", **header}))
        data = b"".join(e.data for e in self.receive() if isinstance(e, Data))
        if header.get("action") != "logs":
            return json.loads(data)
        head = decode_head(data)
        assert head is not None
        return head[0]

    def assertRefused(self, header: dict[str, Any], kind: str, message: str) -> None:
        self.assertEqual(self.answer(header), {"ok": False, "error": kind, "message": message})

    def test_action(self) -> None:
        """An unknown action is refused before anything else."""
        self.assertRefused({"action": "stop", "exec_id": 3}, "invalid", "unknown action 'stop'")
        self.assertRefused({}, "invalid", "unknown action None")

    def test_lookup_first(self) -> None:
        """An exec that is not there, or was deleted, is answered before a wrong field."""
        for action in ("info", "kill", "wait", "delete", "logs"):
            self.assertRefused({"action": action, "exec_id": "ex_9", "signal": "X", "timeout_ms": -1, "from_id": -1},
                               "not_found", "no background exec 'ex_9' in this guest")
            self.assertRefused({"action": action, "signal": "X"}, "not_found", "no background exec None in this guest")
            self.assertRefused({"action": action, "exec_id": "ex_2", "follow": 1}, "gone",
                               "background exec ex_2 was deleted")

    def test_fields(self) -> None:
        """Each action's fields, in the order they are read."""
        signals = ", ".join(SIGNAL_NAMES)
        for header, message in [
            ({"action": "kill", "signal": "STOP", "grace_ms": -1}, f"signal must be one of {signals}"),
            ({"action": "kill", "signal": 15}, f"signal must be one of {signals}"),
            ({"action": "kill", "grace_ms": 3_600_001}, "grace_ms must be an integer 0 .. 3600000"),
            ({"action": "kill", "signal": "KILL", "grace_ms": True}, "grace_ms must be an integer 0 .. 3600000"),
            ({"action": "wait", "timeout_ms": 1.0}, "timeout_ms must be an integer 0 .. 86400000"),
            ({"action": "logs", "from_id": -1, "follow": 1}, "from_id must be an integer 0 .. 9223372036854775807"),
            ({"action": "logs", "follow": "yes"}, "follow must be a boolean"),
            ({"action": "start", "ring_bytes": 0}, "field 'cmd' must be a non-empty string"),
        ]:
            self.assertRefused({"exec_id": "ex_1", **header}, "invalid", message)

    def test_answers(self) -> None:
        """A list, and the delete of an ended exec, are answered."""
        self.assertEqual(self.answer({"action": "list", "exec_id": 5}), {"ok": True, "result": [{"exec_id": "ex_1"}]})
        self.assertEqual(self.answer({"action": "delete", "exec_id": "ex_1", "signal": []}),
                         {"ok": True, "result": {"exec_id": "ex_1", "reaped": True}})

    def test_signal_names(self) -> None:
        """The guest can send every signal the header may name."""
        self.assertEqual(tuple(SIGNALS), SIGNAL_NAMES)
