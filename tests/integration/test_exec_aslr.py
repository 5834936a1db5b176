# -*- test-case-name: tests.integration.test_exec_aslr -*-
"""
A host group's ``guest_aslr`` against real guests: by default the guest
randomizes its processes' address spaces (``randomize_va_space`` 2, the
stack elsewhere in each process); with ``guest_aslr: false`` it boots with
``norandmaps`` (0, the stack at the same address every time) and execs work as
before; a warm group's clone runs its template's kernel, booted without
randomization too.
"""

from __future__ import annotations

from typing import Any

from tests.integration.daemon import CREATE_TIMEOUT, TemplatesDaemonTestCase
from tests.integration.metrics import metric

GROUPS: list[dict[str, Any]] = [
    {"name": "plain", "vcpu": 1, "ram_mb": 256, "storage_size": "1G"},
    {"name": "fast", "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "guest_aslr": False},
    {"name": "warmfast", "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "guest_aslr": False},
]

#: Prints the setting, the kernel command line, then where the stack of two processes is, one after the other.
PROBE = ("cat /proc/sys/kernel/randomize_va_space; cat /proc/cmdline; "
         "grep -m1 '\\[stack\\]' /proc/self/maps; grep -m1 '\\[stack\\]' /proc/self/maps")


class GuestAslrTests(TemplatesDaemonTestCase):
    groups = GROUPS

    @classmethod
    def started(cls) -> None:
        cls.daemon.wait_for("the warm group's template", lambda: metric(
            cls.daemon.request("GET", "/metrics")[2].decode(), "vmservice_template_builds_total", result="ok"
        ) == 1, timeout=240)

    def create(self, group: str) -> str:
        return self.create_node(group, timeout=CREATE_TIMEOUT)

    def probe(self, hostname: str) -> tuple[str, list[str], str, str]:
        code, out = self.daemon.run(hostname, PROBE)
        self.assertEqual(code, 0, out)
        setting, cmdline, first, second = out.strip().split("\n")[:4]
        return setting, cmdline.split(), first.split()[0], second.split()[0]

    def test_default_randomizes(self) -> None:
        """Without the setting: 2, no ``norandmaps``, the stack at another address in each process."""
        setting, cmdline, first, second = self.probe(self.create("plain"))
        self.assertEqual(setting, "2")
        self.assertNotIn("norandmaps", cmdline)
        self.assertNotEqual(first, second)

    def test_off(self) -> None:
        """``guest_aslr: false``: 0, ``norandmaps``, the stack at one address; an exec without a shell works."""
        hostname = self.create("fast")
        setting, cmdline, first, second = self.probe(hostname)
        self.assertEqual(setting, "0")
        self.assertIn("norandmaps", cmdline)
        self.assertEqual(first, second)
        status, _, body = self.daemon.request("POST", f"/vm/{hostname}/exec?cmd=/bin/echo&args=hi&shell=&buffered=true")
        self.assertEqual(status, 200, body)
        self.assertIn(b'"stdout": "hi\\n"', body.replace(b'"stdout":"', b'"stdout": "'))

    def test_warm_clone(self) -> None:
        """A clone of a warm group without ASLR runs its template's kernel: randomization off there too."""
        hostname = self.create("warmfast")
        argv = " ".join(self.qemu_argv(hostname))
        self.assertIn("-incoming defer", argv)
        setting, cmdline, first, second = self.probe(hostname)
        self.assertEqual(setting, "0")
        self.assertIn("norandmaps", cmdline)
        self.assertEqual(first, second)
