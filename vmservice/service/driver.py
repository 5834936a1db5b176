# -*- test-case-name: tests.integration.test_service -*-
"""
The KVM/TCG decision: the hypervisor driver the fleet starts new VMs with,
decided in the background once the fleet starts (see docs/architecture.md,
"Starting again").
"""

from __future__ import annotations

import os
import time

from twisted.logger import Logger

from ..config import Config
from ..hypervisors.base import IHypervisor
from ..hypervisors.probe_memory import ProbeMemory, probe_key
from ..hypervisors.qemu import QemuDriver, QemuSettings, host_tsc_khz, probe_accel, sweep_probes
from ..images.store import Image
from .reactor import IDaemonReactor

#: Logged under the package's name, as when it was one module.
log = Logger(namespace="vmservice.service")


def _read_tsc_khz() -> int | None:
    try:
        with open("/proc/cpuinfo") as f:
            return host_tsc_khz(f.read())
    except OSError:
        return None


def probe_directory(config: Config) -> str:
    """The KVM probe's directory in the state directory: its monitor socket, which marks its QEMU."""
    return os.path.join(config.state_dir, "probe")


async def decide_driver(reactor: IDaemonReactor, config: Config, image: Image) -> IHypervisor:
    """
    Kill the probe QEMUs an earlier run left, probe for KVM (as configured),
    log the choice and why, and make the QEMU driver.
    """
    directory = probe_directory(config)
    for pid in sweep_probes(directory):
        log.info("killed KVM probe process {pid}, left by an earlier run", pid=pid)
    tsc_khz = _read_tsc_khz()
    settings = QemuSettings(tsc_khz=tsc_khz)
    memory = ProbeMemory(directory, probe_key(settings.binary, image.kernel.path, image.initrd.path))
    choice = memory.recall() if config.accel == "auto" else None
    if choice is None:
        choice = await probe_accel(
            reactor, settings.binary, image.kernel.path, image.initrd.path, config.accel, tsc_khz,
            directory=directory,
        )
        if choice.lasting:
            try:
                memory.keep(choice, time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(reactor.seconds())))
            except OSError as error:
                log.warn("could not remember the KVM probe's outcome: {error}", error=error)
    log.info("accelerator: {accel}: {reason}", accel=choice.accel, reason=choice.reason)
    return QemuDriver(reactor, QemuSettings(binary=settings.binary, accel=choice.accel, tsc_khz=tsc_khz,
                                            tb_size_mb=config.tcg_tb_size_mb))
