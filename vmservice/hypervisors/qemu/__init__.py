# -*- test-case-name: tests.hypervisors.qemu -*-
"""
The QEMU driver, by topic: the command lines (:mod:`.command_line`), the
QEMU process the daemon watches (:mod:`.process`), the running machine
(:mod:`.machine`) with its QMP monitor (:mod:`.monitor`) and its state's
saves and loads (:mod:`.migration`), the driver that starts VMs
(:mod:`.driver`), the QEMUs an earlier run left (:mod:`.processes`), the
KVM-or-TCG probe (:mod:`.probe`) and what each needs of the reactor
(:mod:`.reactors`).

It offers the names the rest of the daemon uses, re-exported here.
"""

from ..base import describe_exit
from ..file_identity import binary_identity
from .command_line import (
    PROBE_NAME, QemuSettings, host_tsc_khz, kernel_cmdline, probe_command, qemu_command, qmp_address,
)
from .driver import QemuDriver
from .machine import QemuMachine
from .probe import PROBE_MARKER, PROBE_SOCKET, AccelChoice, kvm_usable, probe_accel
from .processes import QemuProcesses, sweep_probes
from .reactors import IMachineReactor, IProbeReactor, IQemuReactor

__all__ = [
    "AccelChoice",
    "IMachineReactor",
    "IProbeReactor",
    "IQemuReactor",
    "PROBE_MARKER",
    "PROBE_NAME",
    "PROBE_SOCKET",
    "QemuDriver",
    "QemuMachine",
    "QemuProcesses",
    "QemuSettings",
    "binary_identity",
    "describe_exit",
    "host_tsc_khz",
    "kernel_cmdline",
    "kvm_usable",
    "probe_accel",
    "probe_command",
    "qemu_command",
    "qmp_address",
    "sweep_probes",
]
