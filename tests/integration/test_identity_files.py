# -*- test-case-name: tests.integration.test_identity_files -*-
"""
``/etc/hostname``, ``/etc/hosts`` and ``/etc/machine-id`` on real guests, a
clone's and a cold-booted node's: links into the tmpfs ``/run/vmservice``
(so that a clone's adoption writes nothing to its disk), right after the
create, after a reboot and after a suspend and restore; the machine-id a
clone adopted is kept on its disk (``/var/lib/vmservice/machine-id``, with
its hostname) and comes back at boot only on the node it belongs to.  And
the template a clone continues had settled before it was frozen: its
metrics agent served and the kernel had nothing left to zero on its disk.
"""

from __future__ import annotations

import glob
import os

from tests.integration.daemon import TemplatesDaemonTestCase

GROUP = {"count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"}
#: The files and where their links point.
LINKS = "readlink /etc/hostname /etc/hosts /etc/machine-id"
LINKED = "../run/vmservice/hostname\n../run/vmservice/hosts\n../run/vmservice/machine-id\n"
#: Seconds a create may take: the first one of the warm group builds its template.
CREATE_TIMEOUT = "4m"


class IdentityFilesTests(TemplatesDaemonTestCase):
    """One daemon with a warm group (clones, no spare) and a cold one."""

    groups = [{"name": "warm", "warm": True, "warm_spare": False, **GROUP}, {"name": "cold", **GROUP}]

    def names(self, hostname: str) -> tuple[int, str]:
        """The guest's host name, /etc/hostname and its /etc/hosts line."""
        return self.daemon.run(hostname, "hostname; cat /etc/hostname; grep '^127.0.1.1' /etc/hosts")

    def machine_id(self, hostname: str) -> str:
        """The guest's /etc/machine-id ("" when it has none)."""
        return self.daemon.run(hostname, "cat /etc/machine-id 2>/dev/null")[1]

    def wait_until_kept(self, hostname: str) -> str:
        """Wait until the guest kept its machine-id on its disk; what it kept."""
        kept: str = self.daemon.wait_for("the machine-id kept on the disk", lambda: (
            lambda result: result[1] if result[0] == 0 else None)(
                self.daemon.run(hostname, "cat /var/lib/vmservice/machine-id 2>/dev/null")), timeout=120)
        return kept

    def assert_named(self, hostname: str) -> None:
        self.assertEqual(self.names(hostname), (0, f"{hostname}\n{hostname}\n127.0.1.1\t{hostname}\n"))
        self.assertEqual(self.daemon.run(hostname, LINKS), (0, LINKED))

    def test_clone(self) -> None:
        """
        A clone's files are its own, in /run; it keeps its machine-id (with its hostname) on its disk
        :data:`~vmservice.guest.identity.PERSIST_DELAY` seconds after its adoption; a reset keeps them.
        """
        hostname = self.create_node("warm", timeout=CREATE_TIMEOUT)
        self.assertIn("share=off", " ".join(self.qemu_argv(hostname)))
        self.assert_named(hostname)
        machine_id = self.machine_id(hostname)
        self.assertRegex(machine_id, r"\A[0-9a-f]{32}\n\Z")
        self.assertEqual(self.daemon.run(hostname, "stat -c %a /run/vmservice/machine-id"), (0, "444\n"))
        self.assertEqual(self.wait_until_kept(hostname), f"{hostname}\n{machine_id}")
        self.daemon.reboot(hostname)
        self.assert_named(hostname)
        self.assertEqual(self.machine_id(hostname), machine_id)

    def test_clone_reboots_itself(self) -> None:
        """A clone whose machine-id is not on its disk yet keeps it when it reboots itself (the shutdown script)."""
        hostname = self.create_node("warm", timeout=CREATE_TIMEOUT)
        machine_id = self.machine_id(hostname)
        self.wait_until_kept(hostname)
        self.assertEqual(self.daemon.run(hostname, "rm /var/lib/vmservice/machine-id && sync && echo ok"), (0, "ok\n"))
        self.daemon.reboot(hostname, "(sleep 1; reboot) </dev/null >/dev/null 2>&1 &")
        self.assert_named(hostname)
        self.assertEqual(self.machine_id(hostname), machine_id)

    def test_clone_suspend_restore(self) -> None:
        """A clone's files, in the tmpfs, are saved with its memory and restored."""
        hostname = self.create_node("warm", timeout=CREATE_TIMEOUT)
        machine_id = self.machine_id(hostname)
        self.daemon.post(f"/vm/{hostname}/suspend")
        self.daemon.wait_status(hostname, "Suspended")
        self.daemon.post(f"/vm/{hostname}/restore?wait=agent&timeout=2m")
        self.assert_named(hostname)
        self.assertEqual(self.machine_id(hostname), machine_id)

    def test_template_settled(self) -> None:
        """
        A clone does not finish its template's start: its metrics agent served before the template was
        frozen (the clone's console, which begins at its load, never says it started), no ext4lazyinit
        thread zeroes inode tables, and the template's dirty pages were written before it was frozen.
        """
        hostname = self.create_node("warm", timeout=CREATE_TIMEOUT)
        # The clone answers statistics (its metrics agent runs) ...
        stat = self.daemon.wait_for("the clone's statistics", lambda: (
            lambda answer: answer if "snapshot" in answer else None)(self.daemon.json("GET", f"/node/{hostname}/stats")))
        self.assertEqual(stat["snapshot"]["hostname"], hostname)
        # The adoption's log line comes once its files are written (a second after its answer at the latest).
        console = self.daemon.wait_for("the adoption's log line", lambda: (
            lambda text: text if f"adopted {hostname}" in text else None)(self.console(hostname)), timeout=60)
        # ... but did not start in the clone.
        self.assertNotIn("vmservice-metrics: ready", console)
        self.assertEqual(self.daemon.run(hostname, "cat /run/vmservice-metrics.ready && echo ready"), (0, "ready\n"))
        self.assertEqual(self.daemon.run(hostname, "grep -l ext4lazyinit /proc/[0-9]*/comm; echo none"), (0, "none\n"))

    def test_cold_node(self) -> None:
        """
        A cold-booted node's files are its own, in /run; it has no machine-id (none was ever given),
        after a reboot neither.
        """
        hostname = self.create_node("cold")
        self.assertNotIn("memory-backend", " ".join(self.qemu_argv(hostname)))
        self.assert_named(hostname)
        self.assertEqual(self.machine_id(hostname), "")
        self.daemon.reboot(hostname)
        self.assert_named(hostname)
        self.assertEqual(self.machine_id(hostname), "")

    def test_kept_machine_id_only_on_its_node(self) -> None:
        """
        At boot the guest takes the machine-id kept on its disk only if it was kept for its own
        hostname (a fork's child boots from a disk that holds its parent's).
        """
        hostname = self.create_node("cold")
        other = "0123456789abcdef0123456789abcdef"
        own = "fedcba9876543210fedcba9876543210"
        self.assertEqual(self.daemon.run(hostname, f"mkdir -p /var/lib/vmservice && printf 'someone-else\\n{other}\\n'"
                                                   " > /var/lib/vmservice/machine-id && sync && echo ok"), (0, "ok\n"))
        self.daemon.reboot(hostname)
        self.assertEqual(self.machine_id(hostname), "")
        self.assertEqual(self.daemon.run(hostname, f"printf '{hostname}\\n{own}\\n' > /var/lib/vmservice/machine-id"
                                                   " && sync && echo ok"), (0, "ok\n"))
        self.daemon.reboot(hostname)
        self.assertEqual(self.machine_id(hostname), f"{own}\n")
        self.assert_named(hostname)

    def console(self, hostname: str) -> str:
        """What the node's guest printed on its console (the console file in the node's directory)."""
        paths = glob.glob(os.path.join(self.daemon.state_dir, "nodes", hostname, "console*"))
        self.assertEqual(len(paths), 1, paths)
        with open(paths[0], errors="replace") as stream:
            return stream.read()


__all__ = ["IdentityFilesTests"]
