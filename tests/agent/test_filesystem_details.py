"""
Tests for the detailed operations of :mod:`vmservice.agent.filesystem`:
the headers of ``rename``, ``setmeta`` and owned ``mkdir``, and entries with
details read (their fields checked and bounded: the guest is untrusted).
"""

from __future__ import annotations

import json
from typing import Any, Coroutine, Mapping

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from vmservice.agent import filesystem
from vmservice.errors import AgentError, GuestErrorKind
from vmservice.guestport.files import FsDetails

DETAILED = {"name": "f", "type": "file", "size": 1, "mtime_ns": 5, "mode": 0o644, "uid": 1000, "gid": 1000,
            "owner": "user", "group": "user", "symlink_target": None, "target_type": None, "target_mode": None,
            "metadata": {"k": "v"}}


class _Agent:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.headers: list[dict[str, Any]] = []

    async def request(self, header: Mapping[str, Any], limit: int) -> bytes:
        self.headers.append(dict(header))
        return json.dumps({"ok": True, "result": self.answer}).encode()


class DetailsTests(SynchronousTestCase):
    def run_op(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return self.successResultOf(Deferred.fromCoroutine(coroutine))

    def test_detailed_entry(self) -> None:
        agent = _Agent(DETAILED)
        entry = self.run_op(filesystem.stat(agent, "/f", True))  # type: ignore[arg-type]
        self.assertEqual(entry.details, FsDetails(1000, 1000, "user", "user", metadata=(("k", "v"),)))
        self.assertEqual(agent.headers, [{"op": "fs", "action": "stat", "path": "/f", "details": True}])

    def test_plain_entry_has_none(self) -> None:
        plain = {key: DETAILED[key] for key in ("name", "type", "size", "mtime_ns", "mode")}
        self.assertIsNone(self.run_op(filesystem.stat(_Agent(plain), "/f")).details)  # type: ignore[arg-type]

    def test_headers(self) -> None:
        agent = _Agent(DETAILED)
        self.run_op(filesystem.rename(agent, "/a", "/b", 1000, 1001))  # type: ignore[arg-type]
        self.run_op(filesystem.make_directory(agent, "/d", 0o755, 1000, 1000))  # type: ignore[arg-type]
        self.run_op(filesystem.set_metadata(agent, "/f", (("k", "v"),)))  # type: ignore[arg-type]
        self.assertEqual(agent.headers, [
            {"op": "fs", "action": "rename", "path": "/a", "destination": "/b", "details": True, "uid": 1000,
             "gid": 1001},
            {"op": "fs", "action": "mkdir", "path": "/d", "recursive": False, "mode": 0o755, "details": True,
             "uid": 1000, "gid": 1000},
            {"op": "fs", "action": "setmeta", "path": "/f", "details": True, "metadata": {"k": "v"}},
        ])

    def test_forged_details_refused(self) -> None:
        for forged in ({"owner": "x" * 300}, {"uid": -1}, {"uid": True}, {"symlink_target": "/" * 5000},
                       {"target_type": "weird"}, {"metadata": {"k": "v" * 5000}}, {"metadata": {"k": 1}},
                       {"metadata": []}, {"group": None}):
            failure = self.failureResultOf(Deferred.fromCoroutine(
                filesystem.stat(_Agent({**DETAILED, **forged}), "/f", True)), AgentError)  # type: ignore[arg-type]
            self.assertIs(failure.value.kind, GuestErrorKind.MALFORMED, forged)
