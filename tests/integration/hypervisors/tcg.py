"""
How long a guest of the built image may take under TCG, for the tests that boot one with the QEMU
driver (:mod:`tests.integration.hypervisors.test_qemu`, :mod:`tests.integration.hypervisors.test_qemu_pci`).
"""

from __future__ import annotations

#: Seconds a TCG guest may take to boot, and to power off.
BOOT_TIMEOUT = 120.0
