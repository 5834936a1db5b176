# -*- test-case-name: tests.integration.test_clocksource -*-
"""
The guests' clock against real guests under TCG: booted with ``tsc=reliable``
(see :func:`vmservice.hypervisors.qemu.kernel_cmdline`), two guests that boot
together and then keep their vCPUs busy at once, on a host other work loads
too, stay on the TSC clocksource (no fall-back to jiffies) with
high-resolution timers: ``clock_getres`` is 1 ns and the clock moves in steps
far below a jiffy (4 ms).
"""

from __future__ import annotations

import threading
from typing import Any

from tests.integration.daemon import Daemon, SharedDaemonTestCase, ensure_image

GROUPS: list[dict[str, Any]] = [
    {"name": "clock", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"},
]

#: What a guest reports: its command line, clocksource, the kernel's clocksource news, the monotonic
#: clock's resolution and the smallest step it was seen to take (ns).
REPORT = (
    "cat /proc/cmdline; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; "
    "dmesg | grep -c -i -E 'unstable|switched to clocksource .*jiffies'; "
    "python3 -c 'import time\n"
    "print(time.clock_getres(time.CLOCK_MONOTONIC))\n"
    "seen = [time.monotonic_ns() for _ in range(20000)]\n"
    "print(min(b - a for a, b in zip(seen, seen[1:]) if b > a))'"
)

#: Each guest's vCPU kept busy by three loops for 20 s (the host has 2 cores for both and more).
BUSY = "for i in 1 2 3; do timeout 20 sh -c 'while :; do :; done' & done; wait"


class ClocksourceTests(SharedDaemonTestCase):
    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=GROUPS)
        cls.daemon.start()

    def create_together(self, count: int) -> list[str]:
        """``count`` nodes created at once (their boots overlap), each deleted when the test ends."""
        created: list[str] = []
        errors: list[BaseException] = []

        def create() -> None:
            try:
                node = self.daemon.json("POST", "/hostgroup/clock/nodes?wait=agent&timeout=4m", {}, expect=201)
                created.append(node["hostname"])
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=create) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for hostname in created:
            self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/clock/nodes/{hostname}")
        if errors:
            raise errors[0]
        return created

    def assert_on_the_tsc(self, hostname: str) -> None:
        code, out = self.daemon.run(hostname, REPORT)
        self.assertEqual(code, 0, out)
        cmdline, clocksource, fallbacks, resolution, step = out.splitlines()
        self.assertIn("tsc=reliable", cmdline.split())
        self.assertEqual((clocksource, fallbacks), ("tsc", "0"), out)
        self.assertEqual(float(resolution), 1e-9, out)
        self.assertLess(int(step), 1_000_000, out)

    def test_busy_guests_stay_on_the_tsc(self) -> None:
        """Two guests booted together and busy at once keep the TSC clocksource and a fine clock."""
        nodes = self.create_together(2)
        for hostname in nodes:
            self.assert_on_the_tsc(hostname)
        busy = [threading.Thread(target=self.daemon.run, args=(hostname, BUSY)) for hostname in nodes]
        for thread in busy:
            thread.start()
        for thread in busy:
            thread.join()
        for hostname in nodes:
            self.assert_on_the_tsc(hostname)
