# -*- test-case-name: tests.agent.test_filesystem -*-
"""
Tests for :mod:`vmservice.agent.filesystem`: the headers sent, the replies parsed,
and the guest's error kinds and agent failures mapped to service errors, with a
fake agent.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from vmservice import errors
from vmservice.agent import filesystem
from vmservice.agent.errors import AgentRequestFailed, AgentUnavailable
from vmservice.agent.filesystem import MAX_FS_REPLY
from vmservice.guestport.files import FsEntry
from vmservice.wire import ResetCode

ENTRY = {"name": "hosts", "type": "file", "size": 12, "mtime_ns": 1_700_000_000_000_000_001, "mode": 0o644}


class ScriptedAgent:
    """An agent whose ``request`` records the header and answers as told."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.requests: list[tuple[dict[str, Any], int]] = []

    async def request(self, header: Mapping[str, Any], limit: int) -> bytes:
        self.requests.append((dict(header), limit))
        if isinstance(self.answer, Exception):
            raise self.answer
        if isinstance(self.answer, bytes):
            return self.answer
        return json.dumps(self.answer).encode()


class _Fs:
    """The module's operations on one agent, as methods."""

    def __init__(self, agent: ScriptedAgent) -> None:
        self._agent = agent

    def __getattr__(self, name: str) -> Any:
        operation = getattr(filesystem, name)
        return lambda *args, **kwargs: Deferred.fromCoroutine(operation(self._agent, *args, **kwargs))


class FileSystemOperationTests(SynchronousTestCase):
    """The file-system operations against a scripted agent."""

    def call(self, answer: Any, method: str, *args: Any, **kwargs: Any) -> tuple[Any, ScriptedAgent]:
        agent = ScriptedAgent(answer)
        result = self.successResultOf(getattr(_Fs(agent), method)(*args, **kwargs))
        return result, agent

    def fails(self, answer: Any) -> errors.ServiceError:
        """The service error (by the one table) of a stat that gets ``answer``."""
        agent = ScriptedAgent(answer)
        failure = self.failureResultOf(_Fs(agent).stat("/x"), errors.AgentError)
        return errors.service_error(failure.value)

    def test_stat(self) -> None:
        """stat sends the fs header with the path and parses the entry."""
        entry, agent = self.call({"ok": True, "result": ENTRY}, "stat", "/etc/hosts")
        self.assertEqual(entry, FsEntry("hosts", "file", 12, 1_700_000_000_000_000_001, 0o644))
        self.assertEqual(agent.requests, [({"op": "fs", "action": "stat", "path": "/etc/hosts"}, MAX_FS_REPLY)])

    def test_readdir(self) -> None:
        """readdir parses a list of entries, in the guest's order."""
        other = {**ENTRY, "name": "a", "type": "directory"}
        entries, agent = self.call({"ok": True, "result": [other, ENTRY]}, "readdir", "/etc")
        self.assertEqual([e.name for e in entries], ["a", "hosts"])
        self.assertEqual(agent.requests[0][0], {"op": "fs", "action": "readdir", "path": "/etc"})

    def test_mkdir_and_remove_headers(self) -> None:
        """mkdir sends recursive and the integer mode; remove sends recursive."""
        _, agent = self.call({"ok": True, "result": ENTRY}, "mkdir", "/srv/a", True, 0o700)
        self.assertEqual(
            agent.requests[0][0], {"op": "fs", "action": "mkdir", "path": "/srv/a", "recursive": True, "mode": 0o700}
        )
        _, agent = self.call({"ok": True, "result": ENTRY}, "remove", "/srv/a", False)
        self.assertEqual(agent.requests[0][0], {"op": "fs", "action": "remove", "path": "/srv/a", "recursive": False})

    def test_error_kinds(self) -> None:
        """Each guest error kind maps to its status and code; the guest's message is kept."""
        table = {
            "not_found": (404, "not_found"),
            "not_a_directory": (400, "not_a_directory"),
            "not_empty": (409, "directory_not_empty"),
            "exists": (409, "already_exists"),
            "busy": (409, "busy"),
            "permission_denied": (403, "permission_denied"),
            "invalid": (400, "invalid_path"),
            "io_error": (500, "fs_error"),
            "something_new": (500, "fs_error"),
        }
        for kind, (status, code) in table.items():
            error = self.fails({"ok": False, "error": kind, "message": f"/x: {kind}"})
            assert isinstance(error, errors.ServiceError)
            self.assertEqual((error.status, error.code, error.message), (status, code, f"/x: {kind}"), kind)

    def test_agent_failures(self) -> None:
        """
        An unreachable agent is 503; an agent without the fs op is 501; another
        reset or a reply too large is 500.
        """
        cases = [
            (AgentUnavailable("gone"), 503),
            (AgentRequestFailed("unknown op", ResetCode.UNKNOWN_OP), 501),
            (AgentRequestFailed("boom", ResetCode.INTERNAL_ERROR), 500),
            (AgentRequestFailed("reply larger than 33554432 bytes"), 500),
        ]
        for answer, status in cases:
            error = self.fails(answer)
            assert isinstance(error, errors.ServiceError)
            self.assertEqual(error.status, status, answer)

    def test_malformed_replies(self) -> None:
        """Replies that are not JSON, not fs replies, or carry bad entries are 500s."""
        for answer in (
            b"not json",
            [1, 2],
            {"result": ENTRY},
            {"ok": True, "result": {**ENTRY, "size": "12"}},
            {"ok": True, "result": {**ENTRY, "mode": True}},
            {"ok": True, "result": None},
        ):
            error = self.fails(answer)
            assert isinstance(error, errors.ServiceError)
            self.assertEqual((error.status, error.code), (500, "agent_error"), answer)
        agent = ScriptedAgent({"ok": True, "result": ENTRY})
        error = self.failureResultOf(_Fs(agent).readdir("/"), errors.AgentError).value
        self.assertIsInstance(errors.service_error(error), errors.Internal)
