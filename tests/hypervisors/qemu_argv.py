"""
The QEMU command line in the driver's tests: the machine spec it is made from (:data:`SPEC`) and the
values of each of its flags (:func:`flags`).
"""

from __future__ import annotations

from vmservice.hypervisors.base import MachineSpec

SPEC = MachineSpec(
    name="demo-1", vcpus=2, ram_bytes=256 * 1024 * 1024, kernel="/img/vmlinux", initrd="/img/initrd.img",
    disk="/s/demo-1/disk.qcow2", agent_socket="/s/demo-1/agent.sock", qmp_socket="/s/demo-1/qmp.sock",
    console_log="/s/demo-1/console.log",
)


def flags(argv: list[str]) -> dict[str, list[str]]:
    """Each flag of ``argv`` with the values that follow it, in order (a flag may come more than once)."""
    found: dict[str, list[str]] = {}
    for flag, value in zip(argv, argv[1:]):
        if flag.startswith("-"):
            found.setdefault(flag, []).append(value)
    return found
