"""Tests for :mod:`vmservice.e2b.rendering` and :mod:`vmservice.e2b.failures`: E2B's JSON and error statuses."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from twisted.trial.unittest import SynchronousTestCase

from tests.e2b.hosts import snapshot
from vmservice.e2b import rendering
from vmservice.e2b.failures import DOCUMENTED, Call, failure_of
from vmservice.e2b.sandbox import Sandbox, SandboxState, SandboxView
from vmservice.errors import (BadRequest, BodyTooLarge, Conflict, ForbiddenOrigin, InsufficientMemory, NotFound,
                              Unauthorized, WaitTimeout)

WHEN = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
VIEW = SandboxView(Sandbox("iabcdefghij012345678", "base", "e2b", WHEN, WHEN, False, (("k", "v"),), (), "tok"),
                   SandboxState.PAUSED, 2, 256, 2048)


class RenderingTests(SynchronousTestCase):
    def test_created(self) -> None:
        """The create's answer: the SDK's required keys, and the token when there is one."""
        self.assertEqual(rendering.created(VIEW, "0.6.4"), {
            "templateID": "base", "sandboxID": "iabcdefghij012345678", "clientID": "vmservice",
            "envdVersion": "0.6.4", "envdAccessToken": "tok"})
        plain = SandboxView(Sandbox("iabcdefghij012345678", "base", "e2b", WHEN, WHEN), SandboxState.RUNNING, 1, 1, 1)
        self.assertNotIn("envdAccessToken", rendering.created(plain, "0.6.4"))

    def test_listed_and_detail(self) -> None:
        """A listed sandbox and one described: every key the SDK requires, times RFC 3339."""
        listed = rendering.listed(VIEW, "0.6.4")
        self.assertEqual(listed, {
            "templateID": "base", "sandboxID": "iabcdefghij012345678", "clientID": "vmservice",
            "startedAt": "2026-01-02T03:04:05.000006Z", "endAt": "2026-01-02T03:04:05.000006Z", "cpuCount": 2,
            "memoryMB": 256, "diskSizeMB": 2048, "state": "paused", "envdVersion": "0.6.4", "metadata": {"k": "v"}})
        self.assertEqual(rendering.detail(VIEW, "0.6.4"), {
            **listed, "envdAccessToken": "tok", "lifecycle": {"autoResume": False, "onTimeout": "kill"}})
        self.assertEqual(json.loads(rendering.as_bytes([listed])), [listed])

    def test_metric(self) -> None:
        """A sample as SandboxMetric."""
        self.assertEqual(rendering.metric(snapshot("x")), {
            "timestamp": "2026-01-01T00:00:00.000000Z", "timestampUnix": 1767225600, "cpuCount": 2,
            "cpuUsedPct": 25.0, "memUsed": 64 * 2**20, "memTotal": 256 * 2**20, "memCache": 32 * 2**20,
            "diskUsed": 100 * 2**20, "diskTotal": 2048 * 2**20})


class FailureTests(SynchronousTestCase):
    def test_statuses(self) -> None:
        """The domain's errors as the calls' documented statuses; anything else 500; the body E2B's."""
        cases = [
            (NotFound("gone"), Call.INFO, 404), (NotFound("gone"), Call.LIST, 500), (Conflict("c"), Call.PAUSE, 409),
            (Conflict("c"), Call.TIMEOUT, 500), (BadRequest("b"), Call.TIMEOUT, 400), (BodyTooLarge("b"), Call.KILL, 400),
            (Unauthorized("u"), Call.OTHER, 401), (InsufficientMemory("m"), Call.CREATE, 503),
            (InsufficientMemory("m"), Call.INFO, 500), (WaitTimeout("w"), Call.CREATE, 504),
            (WaitTimeout("w"), Call.PAUSE, 500), (ForbiddenOrigin("o"), Call.CREATE, 403), (KeyError("x"), Call.INFO, 500),
        ]
        for error, call, status in cases:
            got, body = failure_of(error, call)
            self.assertEqual(got, status, (error, call))
            message = getattr(error, "message", "internal error")
            self.assertEqual(json.loads(body), {"code": status, "message": message})
        for call, statuses in DOCUMENTED.items():
            self.assertIn(500, statuses)
            self.assertIn(401, statuses)
