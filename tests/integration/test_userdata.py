# -*- test-case-name: tests.integration.test_userdata -*-
"""
Userdata and the login user against real guests: the script runs once at the
first boot, its output reaches the console and a file, health reports its
exit code, ``wait=userdata`` waits for it (and removes a node whose userdata
outlives the timeout), a host group's userdata comes first.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any
from urllib.parse import urlencode

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image, processes_under

GROUPS: list[dict[str, Any]] = [
    {"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
     "userdata": "echo from-group > /root/group.txt"},
    {"name": "plain", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"},
]

SCRIPT = """\
echo "hello from userdata"
echo "to stderr" >&2
echo run >> /root/runs
test "$(id -u)" = 0 && echo "as root with $BASH_VERSION" > /root/who
exit 3
"""


class UserdataTests(SharedDaemonTestCase):
    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=GROUPS)
        cls.daemon.start()

    def health(self, hostname: str) -> dict[str, Any]:
        result: dict[str, Any] = self.daemon.json("GET", f"/vm/{hostname}/health")
        return result

    def test_runs_once_with_its_output(self) -> None:
        """
        wait=userdata answers after the script (the group's first) ran as root with bash; a failure is
        201 with the exit code in health; the output is in the console log and in the guest's log file;
        a reboot does not run it again; the script is not left in the guest.
        """
        created = self.daemon.json("POST", "/hostgroup/demo/nodes?wait=userdata&timeout=3m",
                                    {"userdata": SCRIPT}, expect=201)
        hostname = created["hostname"]
        health = self.health(hostname)
        self.assertEqual((health["userdata_ran"], health["userdata_exit_code"]), (True, 3))
        self.assertEqual(self.daemon.run(hostname, "cat /root/runs /root/group.txt"), (0, "run\nfrom-group\n"))
        self.assertTrue(self.daemon.run(hostname, "cat /root/who")[1].startswith("as root with 5."))
        code, log = self.daemon.run(hostname, "cat /var/log/vmservice/userdata.log")
        self.assertEqual(code, 0)
        self.assertIn("hello from userdata\n", log)
        self.assertIn("to stderr\n", log)
        self.assertEqual(self.daemon.run(hostname, "test -e /run/vmservice/userdata.sh; echo $?"), (0, "1\n"))
        console = self.daemon.json("GET", f"/vm/{hostname}/logs?lines=0")["content"]
        self.assertIn("userdata: hello from userdata", console)
        # A reboot: the marker on the disk keeps it from running again.
        self.daemon.post(f"/vm/{hostname}/shutdown?action=reboot")
        reset_at = time.monotonic()

        def rebooted() -> Any:
            # A guest that booted again has been up for less time than has passed since the reset.
            status, _, body = self.daemon.request("GET", f"/vm/{hostname}/health", timeout=10)
            if status != 200:
                return False
            answer = json.loads(body)
            return answer["system_uptime"] < (time.monotonic() - reset_at) * 1e9 and answer

        health = self.daemon.wait_for("the reboot", rebooted, timeout=180)
        self.assertEqual((health["userdata_ran"], health["userdata_exit_code"]), (True, 3))
        self.assertEqual(self.daemon.run(hostname, "cat /root/runs"), (0, "run\n"))
        self.daemon.json("DELETE", f"/hostgroup/demo/nodes/{hostname}")

    def test_timeout_removes_the_node(self) -> None:
        """Userdata that outlives wait=userdata's timeout: 408, and the node is gone with its VM and files."""
        status, _, body = self.daemon.request("POST", "/hostgroup/plain/nodes?wait=userdata&timeout=45s",
                                              {"userdata": "sleep 600"})
        self.assertEqual((status, json.loads(body)["code"]), (408, "wait_timeout"), body)
        self.assertEqual([n for n in self.daemon.nodes() if n.startswith("plain-")], [])
        self.assertEqual(processes_under(os.path.join(self.daemon.state_dir, "nodes", "plain-")), [])
        self.assertEqual([d for d in os.listdir(os.path.join(self.daemon.state_dir, "nodes")) if d.startswith("plain-")],
                         [])

    def test_without_userdata_and_a_login_user(self) -> None:
        """
        No userdata (nor the group's): wait=userdata answers with the agent and health says it ran, without an
        exit code; import_user makes the user with a home, even without keys.
        """
        created = self.daemon.json("POST", "/hostgroup/plain/nodes?wait=userdata&timeout=3m",
                                   {"import_user": "alice"}, expect=201)
        hostname = created["hostname"]
        health = self.health(hostname)
        self.assertTrue(health["userdata_ran"])
        self.assertNotIn("userdata_exit_code", health)
        self.assertEqual(self.daemon.run(hostname, "id -u alice; stat -c %U:%a /home/alice"), (0, "1000\nalice:755\n"))
        self.daemon.json("DELETE", f"/hostgroup/plain/nodes/{hostname}")

    def test_bad_input(self) -> None:
        """Bad userdata, user names and key lines are 400s with their codes; nothing is created."""
        cases = [
            ({"userdata": "x" * (512 * 1024 + 1)}, "userdata_too_large"),
            ({"import_user": "Bad User"}, "invalid_import_user"),
            ({"ssh_keys": ["not-a-key"]}, "invalid_ssh_key"),
            ({"secrets": ["../../etc/passwd"]}, "invalid_body"),
        ]
        for body, code in cases:
            status, _, data = self.daemon.request("POST", "/hostgroup/plain/nodes?" + urlencode({"wait": "agent"}), body)
            self.assertEqual((status, json.loads(data)["code"]), (400, code), data)
        self.assertEqual(processes_under(os.path.join(self.daemon.state_dir, "nodes", "plain-")), [])
