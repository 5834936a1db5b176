"""
Tests of PCI devices and GPUs through the HTTP API (``POST
/hostgroup/{name}/nodes`` with ``pci_devices`` and ``gpu_count``, ``GET
/hostgroup``), with the fleet on fakes and a fake sysfs tree.
"""

from __future__ import annotations

import os
from typing import Any

from treq.testing import StubTreq

from tests.api.fleet_api import ApiTestCase
from tests.devices.sysfs import FakeSysfs
from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.api.meta import MetaApi
from vmservice.api.nodes import NodesApi
from vmservice.api.vm import VmApi
from vmservice.config import HostGroupConfig
from vmservice.metrics import Metrics

MiB = 1024 * 1024
GPUS = ("0000:01:00.0", "0000:02:00.0")


class DeviceRouteTests(ApiTestCase):
    def setUp(self) -> None:
        root = self.mktemp()
        self.sysfs = FakeSysfs(os.path.join(root, "host"))
        self.sysfs.add(GPUS[0], group="1")
        self.sysfs.add(GPUS[1], driver="nvidia", group="2")
        self.sysfs.add("0000:03:00.0", group="3")
        self.sysfs.add("0000:03:00.1", driver="snd_hda_intel", group="3")
        groups = (HostGroupConfig(name="demo", vcpu=2, ram_bytes=512 * MiB, gpus=GPUS),
                  HostGroupConfig(name="plain", vcpu=1, ram_bytes=256 * MiB))
        self.h = FleetHarness(root, groups, pci=self.sysfs.host)
        self.h.fleet.startService()
        self.metrics = Metrics()
        routes: list[Any] = []
        routes += MetaApi(self.metrics, lambda: routes).routes()
        routes += NodesApi(self.h.fleet).routes() + VmApi(self.h.fleet).routes()
        self.api = Api(self.h.reactor, routes, self.metrics, None)
        self.treq = StubTreq(self.api.resource())

    def create(self, body: bytes, group: str = "demo") -> tuple[int, Any, Any]:
        return self.call("POST", f"/hostgroup/{group}/nodes", body)

    def refused(self, body: bytes, code: str, *words: str, group: str = "demo") -> None:
        """A 400 with ``code`` whose message has ``words``, and no node or VM made."""
        result = self.create(body, group)
        self.assertError(result, 400, code)
        for word in words:
            self.assertIn(word, result[1]["error"])
        self.assertEqual(self.call("GET", "/nodes")[1], [])
        self.assertEqual(self.h.driver.machines, [])
        self.assertEqual(self.h.store.load_all(), ([], []))

    def test_hostgroup_gpu_count(self) -> None:
        """GET /hostgroup reports each group's configured GPUs as gpu_count."""
        code, body, _ = self.call("GET", "/hostgroup")
        self.assertEqual(code, 200)
        self.assertEqual([(g["name"], g["gpu_count"]) for g in body], [("demo", 2), ("plain", 0)])

    def test_refusals(self) -> None:
        """Every failed check is a 400 with its code, naming the device and the reason."""
        self.refused(b'{"pci_devices": ["01:00"]}', "invalid_pci_address", "'01:00'")
        self.refused(b'{"pci_devices": ["09:00.0"]}', "pci_device_not_found", "0000:09:00.0")
        self.refused(b'{"pci_devices": ["02:00.0"]}', "pci_device_not_vfio", "0000:02:00.0", "nvidia")
        self.refused(b'{"pci_devices": ["03:00.0"]}', "iommu_group_not_viable", "0000:03:00.0", "snd_hda_intel")
        self.refused(b'{"gpu_count": 2}', "not_enough_gpus", "1 free", "0000:02:00.0", "nvidia")
        self.refused(b'{"gpu_count": 1}', "not_enough_gpus", "no GPUs configured", group="plain")

    def test_in_use(self) -> None:
        """A GPU given to one node is in use for the next, and free again once that node is deleted."""
        code, body, _ = self.create(b'{"gpu_count": 1}')
        self.assertEqual(code, 201, body)
        self.assertEqual(self.h.driver.machines[0].spec.pci_devices, (GPUS[0],))
        self.assertEqual(self.call("GET", f"/vm/{body['hostname']}")[1]["pci_devices"], [GPUS[0]])
        result = self.create(b'{"pci_devices": ["0000:01:00.0"]}')
        self.assertError(result, 400, "pci_device_in_use")
        self.assertIn(body["hostname"], result[1]["error"])
        self.assertEqual(self.call("DELETE", f"/hostgroup/demo/nodes/{body['hostname']}")[0], 200)
        code, body, _ = self.create(b'{"pci_devices": ["01:00.0"]}')
        self.assertEqual(code, 201, body)
        code, plain, _ = self.create(b'{}')
        self.assertEqual(code, 201, plain)
        self.assertNotIn("pci_devices", self.call("GET", f"/vm/{plain['hostname']}")[1])
