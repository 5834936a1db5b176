"""
Node descriptions and tags against the real daemon and booted guests:
``GET /vm/{hostname}`` checked against what the host and the guest see (the
QEMU process, the disk file and its size inside the guest, the MAC address
of the guest's interface), tag changes seen at once by both listings and
written to the node's record, the errors, and tags kept across daemon
restarts (``kill -9`` right after the answer, and SIGTERM).
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.daemon import IMAGE_DIR, Daemon, SharedDaemonTestCase, ensure_image

GiB = 1 << 30

#: A range of this module's own (ranges are claimed host-wide: other tests' daemons may run meanwhile).
RANGE = "10.86.11.0/29"
DROP = "10.86.200.0/24"

GROUPS: list[dict[str, Any]] = [
    {"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"},
    {"name": "iso", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
     "network": {"mode": "isolated", "range": RANGE, "drop": [DROP]}},
]


def _code(data: bytes) -> str | None:
    code: str | None = json.loads(data).get("code")
    return code


class DescribeAndTagTests(SharedDaemonTestCase):
    """One daemon, a node of a group without a network (``demo-1``) and one of an isolated group (``iso-1``)."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=GROUPS)
        cls.daemon.start()
        for group, body in (("demo", {"tags": ["team=a", "x"]}), ("iso", {})):
            cls.daemon.json("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout=2m", body, expect=201)

    def patch(self, body: Any, hostname: str = "demo-1") -> tuple[int, Any]:
        status, _, data = self.daemon.request("PATCH", f"/vm/{hostname}/tags", body)
        return status, json.loads(data)

    def refused(self, method: str, path: str, body: Any, status: int, code: str) -> None:
        got, headers, data = self.daemon.request(method, path, body)
        self.assertEqual((got, headers["content-type"], _code(data)), (status, "application/json", code), data)
        self.assertIsInstance(json.loads(data)["error"], str)

    def test_describe_node_without_network(self) -> None:
        """
        The description of a running node: its listing entry, the group's
        storage and image, network mode none, its QEMU's pid, the disk file
        the guest sees (1 GiB) on the image's root file system, the files and
        hypervisor it booted with, its agent connected, no snapshot.
        """
        description = self.daemon.json("GET", "/vm/demo-1")
        listed = self.daemon.nodes()["demo-1"]
        self.assertEqual({key: description[key] for key in listed}, listed)
        self.assertEqual((description["status"], description["storage"], description["image"]),
                         ("Running", "image", "default"))
        self.assertRegex(description["created_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(description["network"], {
            "mode": "none", "policy_source": "host_group",
            "host_group": {"allow": [], "drop": []}, "effective": {"allow": [], "drop": []},
        })
        self.assertIn(description["pid"], self.daemon.vm_pids())
        with open(f"/proc/{description['pid']}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        disk = description["disk"]
        self.assertEqual(disk["path"], os.path.join(self.daemon.state_dir, "nodes", "demo-1", "disk.qcow2"))
        self.assertTrue(any(disk["path"].encode() in arg for arg in argv), argv)
        self.assertEqual((disk["format"], disk["size_bytes"]), ("qcow2", GiB))
        self.assertGreater(disk["allocated_bytes"], 0)
        self.assertEqual(self.daemon.run("demo-1", "cat /sys/block/vda/size"), (0, f"{GiB // 512}\n"))
        image = os.path.realpath(os.path.join(IMAGE_DIR, "default"))
        self.assertEqual(disk["backing_file"], os.path.join(image, "rootfs.ext4"))
        self.assertEqual((description["kernel"], description["initrd"]),
                         (os.path.join(image, "vmlinux"), os.path.join(image, "initrd.img")))
        self.assertIn(description["kernel"].encode(), argv)
        self.assertRegex(description["hypervisor"], r"^qemu microvm, (kvm|tcg)$")
        self.assertEqual((description["agent_connected"], description["snapshot"], description["protected"]),
                         (True, False, False))
        self.assertNotIn("commit_id", description)
        self.assertNotIn("parent_commit_id", description)

    def test_describe_isolated_node(self) -> None:
        """An isolated node's network: its group's policy, its /30 address and gateway, the MAC the guest has."""
        network = self.daemon.json("GET", "/vm/iso-1")["network"]
        policy = {"allow": [], "drop": [DROP]}
        self.assertEqual(
            {key: network[key] for key in ("mode", "policy_source", "host_group", "effective", "address", "gateway")},
            {"mode": "isolated", "policy_source": "host_group", "host_group": policy, "effective": policy,
             "address": "10.86.11.2/30", "gateway": "10.86.11.1"},
        )
        code, mac = self.daemon.run("iso-1", "cat /sys/class/net/$(ls /sys/class/net | grep -v '^lo$' | head -1)/address")
        self.assertEqual((code, mac.strip()), (0, network["mac"]))
        code, routes = self.daemon.run("iso-1", "cat /proc/net/route")
        gateway_hex = "".join(f"{int(part):02X}" for part in reversed("10.86.11.1".split(".")))
        self.assertIn(gateway_hex, routes)

    def test_tags_round_trip(self) -> None:
        """
        GET reads the tags; PATCH adds and removes at once, replaces (duplicates
        collapse), clears; both listings' filters and the description see
        each change at once, and the node's record on disk holds it.
        """
        self.assertEqual(self.patch({"replace": ["team=a", "x"]}), (200, {"hostname": "demo-1", "tags": ["team=a", "x"]}))
        self.assertEqual(self.daemon.json("GET", "/vm/demo-1/tags"), {"hostname": "demo-1", "tags": ["team=a", "x"]})
        names = lambda path: [node["hostname"] for node in self.daemon.json("GET", path)]
        self.assertEqual(self.patch({"add": ["team=b", "x"], "remove": ["team=a"]}),
                         (200, {"hostname": "demo-1", "tags": ["x", "team=b"]}))
        self.assertEqual(names("/nodes?tag=team%3Db"), ["demo-1"])
        self.assertEqual(names("/nodes?tag=team%3Da"), [])
        self.assertEqual(names("/hostgroup/demo/nodes?tag_prefix=team%3D"), ["demo-1"])
        self.assertEqual(names("/hostgroup/iso/nodes?tag_prefix=team%3D"), [])
        self.assertEqual(self.daemon.json("GET", "/vm/demo-1")["tags"], ["x", "team=b"])
        with open(os.path.join(self.daemon.state_dir, "nodes", "demo-1", "node.json")) as f:
            self.assertEqual(json.load(f)["tags"], ["x", "team=b"])
        self.assertEqual(self.patch({"replace": ["é ü", "é ü", "k=v"]})[1]["tags"], ["é ü", "k=v"])
        self.assertEqual(names("/nodes?tag=%C3%A9%20%C3%BC"), ["demo-1"])
        self.assertEqual(self.patch({"replace": []})[1]["tags"], [])
        self.assertEqual(names("/nodes?tag_prefix=k"), [])
        self.assertEqual(self.patch({"add": ["iso-tag"]}, "iso-1")[1]["tags"], ["iso-tag"])
        self.assertEqual(names("/nodes?tag=iso-tag"), ["iso-1"])

    def test_errors(self) -> None:
        """Unknown node 404, invalid hostname 400, bad bodies and tags 400, both listing filters 400."""
        self.refused("GET", "/vm/demo-9", None, 404, "node_not_found")
        self.refused("GET", "/vm/demo-9/tags", None, 404, "node_not_found")
        self.refused("PATCH", "/vm/demo-9/tags", {"add": ["a"]}, 404, "node_not_found")
        self.refused("GET", "/vm/Demo_1", None, 400, "invalid_hostname")
        self.refused("PATCH", "/vm/Demo_1/tags", {"add": ["a"]}, 400, "invalid_hostname")
        for body in ({}, {"add": ["a"], "replace": []}, {"add": ["a"], "remove": ["a"]}, {"add": [""]},
                     {"add": ["bell\u0007"]}, {"add": ["y" * 257]}, {"add": "a"}, {"colour": ["red"]}, b""):
            self.refused("PATCH", "/vm/demo-1/tags", body, 400, "invalid_body")
        self.refused("PATCH", "/vm/demo-1/tags", b"{", 400, "invalid_json")
        self.patch({"replace": ["keep"]})
        self.refused("PATCH", "/vm/demo-1/tags", {"add": [f"t{i}" for i in range(64)]}, 400, "too_many_tags")
        self.refused("GET", "/nodes?tag=a&tag_prefix=b", None, 400, "conflicting_filters")
        self.refused("GET", "/hostgroup/demo/nodes?tag=a&tag_prefix=b", None, 400, "conflicting_filters")
        self.refused("POST", "/hostgroup/demo/nodes", {"tags": ["bell\u0007"]}, 400, "invalid_body")
        self.assertEqual(self.daemon.json("GET", "/vm/demo-1/tags")["tags"], ["keep"])


class TagRestartTests(SynchronousTestCase):
    """Tags across daemon restarts: each test runs a daemon of its own."""

    def daemon(self) -> Daemon:
        ensure_image()
        daemon = Daemon()
        self.addCleanup(daemon.cleanup)
        daemon.start()
        return daemon

    def test_kill_9_right_after_the_answer(self) -> None:
        """A change answered just before a kill -9 of the daemon is there after the restart, VM adopted."""
        daemon = self.daemon()
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {"tags": ["a"]}, expect=201)
        pid = daemon.json("GET", "/vm/demo-1")["pid"]
        self.assertEqual(daemon.json("PATCH", "/vm/demo-1/tags", {"add": ["b"], "remove": ["a"]})["tags"], ["b"])
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        daemon.start()
        daemon.wait_for("adoption", lambda: daemon.nodes().get("demo-1", {}).get("status") == "Running", 30)
        self.assertEqual(daemon.json("GET", "/vm/demo-1/tags")["tags"], ["b"])
        self.assertEqual([n["hostname"] for n in daemon.json("GET", "/nodes?tag=b")], ["demo-1"])
        self.assertEqual(daemon.json("GET", "/nodes?tag=a"), [])
        self.assertEqual(daemon.json("GET", "/vm/demo-1")["pid"], pid)
        daemon.wait_for("the adopted agent", lambda: daemon.json("GET", "/vm/demo-1")["agent_connected"], 30)

    def test_sigterm_and_a_stopped_node(self) -> None:
        """
        A persistent node keeps its changed tags when SIGTERM stops it; once
        Stopped it is described without pid or agent, takes tag changes, and
        keeps them across a kill -9.
        """
        daemon = self.daemon()
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {"persistent": True}, expect=201)
        daemon.json("PATCH", "/vm/demo-1/tags", {"replace": ["keep", "me"]})
        self.assertEqual(daemon.stop(), -signal.SIGTERM)
        daemon.start()
        description = daemon.json("GET", "/vm/demo-1")
        self.assertEqual((description["status"], description["tags"]), ("Stopped", ["keep", "me"]))
        self.assertNotIn("pid", description)
        self.assertEqual((description["agent_connected"], description["snapshot"]), (False, False))
        self.assertEqual(description["disk"]["size_bytes"], GiB)
        self.assertEqual(daemon.json("PATCH", "/vm/demo-1/tags", {"remove": ["me"]})["tags"], ["keep"])
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        daemon.start()
        self.assertEqual(daemon.json("GET", "/vm/demo-1/tags")["tags"], ["keep"])
        self.assertEqual([n["status"] for n in daemon.json("GET", "/nodes?tag=keep")], ["Stopped"])
