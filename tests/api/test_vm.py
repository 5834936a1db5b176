"""
Tests for ``GET /vm/{hostname}`` (:mod:`vmservice.api.vm`): the wire shape
existing clients decode (the Node fields, ``storage`` and ``image`` as
strings, ``network`` with its policies) and the extensions, through a real
Site and Agent over in-memory connections, with the fleet on fakes.
"""

from __future__ import annotations

from ipaddress import IPv4Network

from treq.testing import StubTreq

from tests.api.test_app import ApiTestCase
from tests.fakes import FleetHarness
from vmservice.api.app import Api
from vmservice.api.nodes import NodesApi
from vmservice.api.vm import VmApi
from vmservice.config import HostGroupConfig, NetworkConfig
from vmservice.nodes.tagging import TagEdit

MiB = 1024 * 1024


class DescribeRouteTests(ApiTestCase):
    def test_plain_node(self) -> None:
        """Every field of a running node of a group without a network; unknown facts are left out."""
        code, created, _ = self.call("POST", "/hostgroup/demo/nodes", b'{"tags": ["a"], "persistent": true}')
        self.assertEqual(code, 201)
        self.h.agents[0].ready()
        code, body, _ = self.call("GET", "/vm/demo-1")
        self.assertEqual(code, 200)
        disk = body.pop("disk")
        self.assertEqual(
            body,
            {
                "hostname": "demo-1", "hostgroup": "demo", "ip": "", "ram_bytes": 512 * MiB, "cpus": 2,
                "created_at": created["created_at"], "tags": ["a"], "arch": "x86_64", "status": "Running",
                "persistent": True,
                "protected": False, "snapshot": False, "agent_connected": True,
                "storage": "image", "image": "default",
                "network": {"mode": "none", "policy_source": "host_group",
                            "host_group": {"allow": [], "drop": []}, "effective": {"allow": [], "drop": []}},
                "pid": 1000, "kernel": self.h.image.kernel.path, "initrd": self.h.image.initrd.path,
                "hypervisor": "fake",
            },
        )
        self.assertEqual(disk["format"], "qcow2")
        self.assertEqual(disk["backing_file"], self.h.image.rootfs.path)
        self.assertTrue(disk["path"].endswith("/nodes/demo-1/disk.qcow2"))
        self.assertNotIn("commit_id", body)

    def test_listing_fields_agree(self) -> None:
        """The Node fields of the description are the node's listing entry, also after a tag change."""
        self.call("POST", "/hostgroup/demo/nodes", b'{"tags": ["a"]}')
        self.h.fleet.tagging.edit("demo-1", TagEdit(add=("b",)))
        listed = self.call("GET", "/nodes")[1][0]
        described = self.call("GET", "/vm/demo-1")[1]
        self.assertEqual({key: described[key] for key in listed}, listed)

    def test_errors(self) -> None:
        """Unknown node 404, bad hostname 400."""
        self.assertError(self.call("GET", "/vm/demo-9"), 404, "node_not_found")
        self.assertError(self.call("GET", "/vm/Bad_Name"), 400, "invalid_hostname")


class DescribeNetworkTests(ApiTestCase):
    def setUp(self) -> None:
        super().setUp()  # the metrics; the fleet is replaced by one with an isolated group
        network = NetworkConfig(mode="isolated", range=IPv4Network("10.77.0.0/24"),
                                drop=(IPv4Network("10.9.0.0/16"),))
        self.h = FleetHarness(self.mktemp(), (HostGroupConfig(name="iso", vcpu=1, ram_bytes=256 * MiB,
                                                              network=network),))
        self.h.fleet.startService()
        self.api = Api(self.h.reactor, NodesApi(self.h.fleet).routes() + VmApi(self.h.fleet).routes(), self.metrics,
                       None)
        self.treq = StubTreq(self.api.resource())

    def test_isolated(self) -> None:
        """An isolated node: its group's policy (effective the same), address with prefix, gateway, MAC."""
        self.assertEqual(self.call("POST", "/hostgroup/iso/nodes", b"{}")[0], 201)
        network = self.call("GET", "/vm/iso-1")[1]["network"]
        self.assertEqual(network, {
            "mode": "isolated", "policy_source": "host_group",
            "host_group": {"allow": [], "drop": ["10.9.0.0/16"]}, "effective": {"allow": [], "drop": ["10.9.0.0/16"]},
            "address": "10.77.0.2/30", "gateway": "10.77.0.1", "mac": "52:54:0a:4d:00:02",
        })
