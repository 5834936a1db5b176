# -*- test-case-name: tests.integration.test_hostname -*-
"""
``hostname`` at create against a real daemon and real guests: the guest's
host name is its node's, chosen or given by the group (``<group>-<n>``); a
name in use is 409 and an invalid one 400, and neither creates anything.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image

#: A chosen name as long as a DNS label may be (63 characters).
CHOSEN = "web-" + "x" * 55 + "-one"


class HostnameTests(SharedDaemonTestCase):
    """One daemon; one node with a chosen hostname, one named by its group."""

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon()
        cls.daemon.start()
        cls.chosen = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {"hostname": CHOSEN},
                                     expect=201)
        cls.named = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)

    def guest_names(self, hostname: str) -> tuple[int, str]:
        """What the guest of node ``hostname`` calls itself: its host name, /etc/hostname, its /etc/hosts line."""
        return self.daemon.run(hostname, "hostname; cat /etc/hostname; grep '^127.0.1.1' /etc/hosts")

    def refused(self, body: dict[str, Any], status: int, code: str) -> None:
        """Create with ``body`` answers ``status`` with ``code``, and no node, VM or node directory is added."""
        before = self.daemon.nodes()
        answer, _, data = self.daemon.request("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", body)
        self.assertEqual((answer, json.loads(data)["code"]), (status, code), data)
        self.assertEqual(self.daemon.nodes(), before)
        self.assertEqual(sorted(os.listdir(os.path.join(self.daemon.state_dir, "nodes"))), sorted(before))
        self.assertEqual(len(self.daemon.vm_pids()), len(before))

    def test_chosen(self) -> None:
        """A chosen hostname is the node's and its guest's (hostname, /etc/hostname, /etc/hosts)."""
        self.assertEqual(self.chosen["hostname"], CHOSEN)
        self.assertIn(CHOSEN, self.daemon.nodes())
        self.assertEqual(self.guest_names(CHOSEN), (0, f"{CHOSEN}\n{CHOSEN}\n127.0.1.1\t{CHOSEN}\n"))

    def test_after_a_reboot(self) -> None:
        """A rebooted guest comes back with its node's name."""
        self.daemon.post(f"/vm/{CHOSEN}/shutdown?action=reboot")
        reset_at = time.monotonic()

        def rebooted() -> bool:
            # A guest that booted again has been up for less time than has passed since the reset.
            status, _, body = self.daemon.request("GET", f"/vm/{CHOSEN}/health", timeout=10)
            return status == 200 and json.loads(body)["system_uptime"] < (time.monotonic() - reset_at) * 1e9

        self.daemon.wait_for("the reboot", rebooted, timeout=180)
        self.assertEqual(self.guest_names(CHOSEN), (0, f"{CHOSEN}\n{CHOSEN}\n127.0.1.1\t{CHOSEN}\n"))

    def test_named_by_the_group(self) -> None:
        """A node created without a hostname is <group>-<n>, and so is its guest."""
        name = self.named["hostname"]
        self.assertRegex(name, r"^demo-[0-9]+$")
        self.assertEqual(self.guest_names(name), (0, f"{name}\n{name}\n127.0.1.1\t{name}\n"))

    def test_taken(self) -> None:
        """A hostname in use, chosen or given by the group: 409 hostname_taken, nothing more created."""
        self.refused({"hostname": CHOSEN}, 409, "hostname_taken")
        self.refused({"hostname": self.named["hostname"]}, 409, "hostname_taken")

    def test_invalid(self) -> None:
        """A hostname that is not a lowercase DNS label of at most 63 characters: 400 invalid_hostname."""
        for name in ("Web", "web_1", "-web", "web-", "web.example", "x" * 64, "web 1"):
            self.refused({"hostname": name}, 400, "invalid_hostname")
