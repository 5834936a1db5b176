"""
A fleet of fakes (:class:`tests.fakes.FleetHarness`) on a short state directory in a test case, with
shortcuts to run its operations and read its records: :class:`LifecycleTestCase`, the base of the
fleet's lifecycle tests.
"""

from __future__ import annotations

import os
from typing import Any, Coroutine

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeDriver, FleetHarness
from tests.short_dirs import short_dir
from vmservice.config import HostGroupConfig
from vmservice.nodes.model import CreateRequest, NodeRecord, Wait


class LifecycleTestCase(SynchronousTestCase):
    groups: tuple[HostGroupConfig, ...] | None = None

    def setUp(self) -> None:
        self.state_dir = short_dir()
        self.h = self.harness()

    def harness(self, driver: FakeDriver | None = None) -> FleetHarness:
        h = FleetHarness(self.state_dir, self.groups, driver)
        h.fleet.startService()
        return h

    @property
    def fleet(self) -> Any:
        return self.h.fleet

    def do(self, coroutine: Coroutine[Any, Any, Any]) -> Deferred[Any]:
        return Deferred.fromCoroutine(coroutine)

    def ok(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return self.successResultOf(self.do(coroutine))

    def fails(self, coroutine: Coroutine[Any, Any, Any], kind: type[Exception], code: str | None = None) -> Exception:
        error = self.failureResultOf(self.do(coroutine), kind).value
        if code is not None:
            self.assertEqual(error.code, code, str(error))
        return error

    def create(self, group: str = "demo", **request: Any) -> NodeRecord:
        return self.ok(self.fleet.create(group, CreateRequest(**request), Wait.NONE, 300.0))

    def stored(self, hostname: str = "demo-1", h: FleetHarness | None = None) -> NodeRecord | None:
        """The record on disk (None when there is none)."""
        records, _ = (h or self.h).store.load_all()
        return {r.hostname: r for r in records}.get(hostname)

    def path(self, name: str, hostname: str = "demo-1") -> str:
        return os.path.join(self.h.store.node_dir(hostname), name)

    def restart(self) -> FleetHarness:
        """Crash the daemon and start a new one on the same state and (surviving) machines."""
        self.h.crash()
        self.h = self.harness(self.h.driver)
        return self.h
