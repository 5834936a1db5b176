"""
A fleet of fakes with warm start, started for a test (:func:`started_fleet`):
what the tests of a group setting that reaches templates share.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FleetHarness
from tests.nodes.fleets import fleet_of
from tests.nodes.warm.adoptions import FakeAdoption
from vmservice.config import HostGroupConfig
from vmservice.nodes.fleet import Fleet
from vmservice.nodes.warm.templates import TemplateStore


def started_fleet(
    case: SynchronousTestCase, groups: tuple[HostGroupConfig, ...],
    before_start: Optional[Callable[[FleetHarness], None]] = None,
) -> tuple[FleetHarness, Fleet]:
    """
    A harness of ``groups`` and its fleet with warm start (templates in the test's directory), started;
    ``before_start`` changes the harness first.
    """
    state_dir = case.mktemp()
    harness = FleetHarness(state_dir, groups=groups)
    if before_start is not None:
        before_start(harness)
    store = TemplateStore(harness.reactor, state_dir, os.path.join(state_dir, "shm"), 1 << 30)
    fleet = fleet_of(harness.parts, store, FakeAdoption(harness))
    fleet.startService()
    case.addCleanup(lambda: fleet.stopService() if fleet.running else None)
    return harness, fleet
