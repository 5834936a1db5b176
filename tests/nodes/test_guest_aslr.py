"""
Tests of a host group's ``guest_aslr`` through the fleet on fakes: it reaches
the VM's machine spec (whence the kernel command line's ``norandmaps``), and
a warm group's template, whose kernel its clones run, is keyed by it.
"""

from __future__ import annotations

import hashlib
import json

from attrs import asdict, evolve
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeMachine
from tests.nodes.warm_fleets import started_fleet
from vmservice.config import HostGroupConfig
from vmservice.nodes.warm.template_supply import template_key
from vmservice.nodes.model import CreateRequest, Wait

MiB = 1024 * 1024
GROUPS = (
    HostGroupConfig(name="plain", vcpu=1, ram_bytes=256 * MiB),
    HostGroupConfig(name="fast", vcpu=1, ram_bytes=256 * MiB, guest_aslr=False),
    HostGroupConfig(name="warmfast", vcpu=1, ram_bytes=256 * MiB, warm=True, guest_aslr=False),
    HostGroupConfig(name="warm", vcpu=1, ram_bytes=256 * MiB, warm=True),
)


class GuestAslrTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.harness, self.fleet = started_fleet(self, GROUPS)

    def machine(self, group: str) -> FakeMachine:
        before = len(self.harness.driver.machines)
        Deferred.fromCoroutine(self.fleet.create(group, CreateRequest(), Wait.NONE, 60))
        self.assertEqual(len(self.harness.driver.machines), before + 1)
        return self.harness.driver.machines[-1]

    def test_cold(self) -> None:
        """A cold boot's VM randomizes address spaces unless its group says ``guest_aslr: false``."""
        self.assertTrue(self.machine("plain").spec.aslr)
        self.assertFalse(self.machine("fast").spec.aslr)

    def test_template(self) -> None:
        """A warm group's template (built at start) is booted with its group's setting: its clones run that kernel."""
        image, driver = self.harness.image, self.harness.driver
        expected = {f"template-{template_key(group, 256 * MiB, 1, image, driver).digest()[:8]}": group.guest_aslr
                    for group in GROUPS if group.warm}
        templates = {vm.spec.name: vm.spec.aslr for vm in driver.machines if vm.spec.name.startswith("template-")}
        self.assertEqual(templates, expected)
        self.assertEqual(sorted(expected.values()), [False, True])

    def test_key(self) -> None:
        """Groups that differ only in ``guest_aslr`` have different templates; a key with it on keeps its old digest."""
        image, driver = self.harness.image, self.harness.driver
        on = template_key(GROUPS[3], 256 * MiB, 1, image, driver)
        off = template_key(evolve(GROUPS[3], guest_aslr=False), 256 * MiB, 1, image, driver)
        self.assertTrue(on.aslr)
        self.assertFalse(off.aslr)
        self.assertNotEqual(on, off)
        self.assertNotEqual(on.digest(), off.digest())
        self.assertFalse(on.supersedes(off) or off.supersedes(on))
        fields = asdict(on)
        del fields["aslr"], fields["vsock"]
        self.assertEqual(on.digest(), hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12])
