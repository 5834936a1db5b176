# -*- test-case-name: tests.agent.test_provisioning -*-
"""
Tests for :mod:`vmservice.agent.provisioning`: what the host sends for the
``secrets``, ``login`` and ``userdata`` requests and how it reads the answers.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from vmservice.agent import provisioning
from vmservice.agent.errors import AgentRequestFailed
from vmservice.guestport.guest import GuestSecret, LoginOutcome, UserdataOutcome


class FakeChannel:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.sent: list[tuple[dict[str, Any], bytes]] = []

    def open_stream(self, header: Mapping[str, Any], protocol: Any) -> Any:
        raise NotImplementedError

    async def request(self, header: Mapping[str, Any], limit: int, body: bytes = b"") -> bytes:
        self.sent.append((dict(header), body))
        return self.answer if isinstance(self.answer, bytes) else json.dumps(self.answer).encode()


class ProvisioningTests(SynchronousTestCase):
    def run_(self, coroutine: Any) -> Any:
        return self.successResultOf(Deferred.fromCoroutine(coroutine))

    def test_secrets(self) -> None:
        """Entries in the header, contents one after the other in the body; the answer's removed names."""
        channel = FakeChannel({"placed": ["a", "b"], "removed": ["old"]})
        secrets = (GuestSecret("a", b"one", 0o400, 1, 2), GuestSecret("b", b"", 0o600, 0, 0))
        self.assertEqual(self.run_(provisioning.place_secrets(channel, secrets)), ("old",))
        self.assertEqual(channel.sent, [({"op": "secrets", "entries": [
            {"name": "a", "size": 3, "mode": 0o400, "uid": 1, "gid": 2},
            {"name": "b", "size": 0, "mode": 0o600, "uid": 0, "gid": 0}]}, b"one")])

    def test_userdata(self) -> None:
        """The script is the body; the answer is the outcome."""
        channel = FakeChannel({"state": "finished", "exit_code": 2, "ran_script": True})
        self.assertEqual(self.run_(provisioning.run_userdata(channel, b"exit 2")), UserdataOutcome("finished", 2, True))
        self.assertEqual(channel.sent, [({"op": "userdata", "size": 6}, b"exit 2")])

    def test_login(self) -> None:
        """Keys one per line in the body."""
        channel = FakeChannel({"user": "root", "uid": 0, "home": "/root", "created": False, "sshd": "started"})
        outcome = self.run_(provisioning.login(channel, "root", ("k1", "k2")))
        self.assertEqual(outcome, LoginOutcome("root", 0, "/root", False, "started"))
        self.assertEqual(channel.sent, [({"op": "login", "user": "root"}, b"k1\nk2\n")])

    def test_nonsense(self) -> None:
        """Answers that are not what the guest should say fail as malformed."""
        cases = [
            (provisioning.place_secrets, ((),), [b"not json", [1], {"removed": "x"}]),
            (provisioning.run_userdata, (b"",), [{"state": "running"}, {"state": "finished", "exit_code": "0"}]),
            (provisioning.login, ("root", ()), [{"user": "root"}, b"{"]),
        ]
        for call, arguments, answers in cases:
            for answer in answers:
                d = Deferred.fromCoroutine(call(FakeChannel(answer), *arguments))  # type: ignore[operator]
                self.failureResultOf(d, AgentRequestFailed)
