# -*- test-case-name: tests.hypervisors.qemu.test_probe -*-
"""
The KVM-or-TCG decision: a probe guest booted under KVM (:func:`probe_accel`)
whose QEMU never outlives the probe, and its outcome (:class:`AccelChoice`).
"""

from __future__ import annotations

import os
import shutil
import stat

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred, FailureGroup, race
from twisted.internet.interfaces import IProcessTransport
from twisted.internet.task import deferLater

from ..base import describe_exit
from .command_line import probe_command
from .process import QemuProcess, child_env
from .reactors import IProbeReactor

#: What the initramfs prints in probe mode before it powers off.
PROBE_MARKER = b"VMSERVICE_PROBE_OK"
#: The probe's monitor socket, in its directory: the mark :func:`.processes.sweep_probes` finds it by.
PROBE_SOCKET = "qmp.sock"


@frozen
class AccelChoice:
    """
    The outcome of the KVM probe.

    :ivar accel: ``kvm`` or ``tcg``.
    :ivar reason: one sentence saying why, for the log.
    :ivar lasting: a probe guest ran and gave this outcome, which holds as
        long as the host's kernel, its KVM device, QEMU and the guest kernel
        stay the same (:mod:`vmservice.hypervisors.probe_memory` remembers
        it); not for a choice set in the configuration or a probe that could
        not start.
    """

    accel: str
    reason: str
    lasting: bool = False


def kvm_usable(path: str = "/dev/kvm") -> bool:
    """
    Whether the KVM device exists and can be opened for reading and writing.

    :param path: the KVM device.
    """
    return os.access(path, os.R_OK | os.W_OK)


def _probe_directory(path: str) -> None:
    """Make the probe's directory (0700), or check the one there is a directory and no link."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise NotADirectoryError(f"{path} is not a directory") from None


def _parent_death_prefix() -> list[str]:
    """
    ``setpriv --pdeathsig KILL`` (util-linux), which execs its program in
    place (the pid spawned stays QEMU's) with the kernel told to SIGKILL it
    when its parent, the daemon, dies: even by ``kill -9``.  Nothing when
    ``setpriv`` is missing (the next start's :func:`.processes.sweep_probes`
    is then the only net).
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


async def probe_accel(
    reactor: IProbeReactor,
    binary: str,
    kernel: str,
    initrd: str,
    requested: str,
    tsc_khz: int | None,
    *,
    directory: str,
    kvm_path: str = "/dev/kvm",
    timeout: float = 15.0,
) -> AccelChoice:
    """
    Decide between KVM and TCG.

    ``requested`` is the configuration's ``accel``: ``tcg`` and ``kvm`` are
    obeyed as they are; ``auto`` uses KVM only when the device is usable and a
    probe guest really boots under it within ``timeout`` seconds (a nested
    KVM may crash QEMU at once or run a guest that never gets anywhere), and
    TCG otherwise.

    The probe QEMU never outlives the probe: it is killed and reaped once
    the decision is made, and also when the returned coroutine is cancelled
    (the daemon stops during the probe), which then ends only once the
    QEMU is gone.  It dies with the daemon (a parent-death signal), and it
    is marked as this state directory's probe (its monitor in ``directory``)
    so that :func:`.processes.sweep_probes` finds one that survived anyway.

    :param reactor: runs the probe QEMU and its timeout.
    :param binary: the QEMU system emulator.
    :param kernel: the guest kernel the probe boots.
    :param initrd: the initramfs, which has a probe mode.
    :param requested: ``kvm``, ``tcg`` or ``auto``.
    :param tsc_khz: the host TSC frequency for the guest kernel, if known.
    :param directory: the probe's directory (made 0700 if missing), where
        its monitor socket is.
    :param kvm_path: the KVM device.
    :param timeout: seconds the probe guest has to show a sign of life.
    """
    if requested in ("kvm", "tcg"):
        return AccelChoice(requested, "set in the configuration")
    if not kvm_usable(kvm_path):
        return AccelChoice("tcg", f"{kvm_path} is missing or not accessible")
    argv = [*_parent_death_prefix(),
            *probe_command(binary, kernel, initrd, "kvm", tsc_khz, os.path.join(directory, PROBE_SOCKET))]
    try:
        process, seen, transport = _spawn_probe(reactor, argv, directory)
    except OSError as error:
        return AccelChoice("tcg", f"the KVM probe could not start: {error}")
    result = await _probe_outcome(reactor, process, seen, transport, timeout)
    if result == "ok":
        return AccelChoice("kvm", "a probe guest booted under KVM", lasting=True)
    return AccelChoice("tcg", f"the KVM probe failed ({result})", lasting=True)


def _spawn_probe(
    reactor: IProbeReactor, argv: list[str], directory: str
) -> tuple[QemuProcess, Deferred[None], IProcessTransport]:
    """
    Start the probe QEMU ``argv`` in its ``directory`` (made first).

    :return: its protocol, a Deferred that fires once its output shows
        :data:`PROBE_MARKER`, and its transport.
    :raise OSError: the directory cannot be made or QEMU cannot start.
    """
    process = QemuProcess()
    seen: Deferred[None] = Deferred()
    process.watch = (PROBE_MARKER, seen)
    _probe_directory(directory)
    transport = reactor.spawnProcess(process, argv[0], argv, env=child_env(), childFDs={0: "w", 1: "r", 2: "r"})
    return process, seen, transport


async def _probe_outcome(
    reactor: IProbeReactor, process: QemuProcess, seen: Deferred[None], transport: IProcessTransport, timeout: float
) -> str:
    """
    ``ok`` once the probe guest showed :data:`PROBE_MARKER`, else why not;
    the probe QEMU killed and reaped before it returns, cancelled or not.
    """
    try:
        # The first of: the marker, the end of the probe QEMU, the timeout (the
        # others are cancelled).  None of them fails: all do only when this
        # coroutine is cancelled, which cancels the race.
        try:
            _, result = await race(
                [
                    seen.addCallback(lambda _: "ok"),
                    process.ended.addCallback(describe_exit),
                    deferLater(reactor, timeout, lambda: f"no sign of life from the probe guest in {timeout:g} s"),
                ]
            )
        except FailureGroup:
            raise CancelledError("the KVM probe was stopped") from None
    finally:
        if not process.finished:
            try:
                transport.signalProcess("KILL")
            except Exception:
                pass
            await process.ended
    return result


__all__ = ["AccelChoice", "PROBE_MARKER", "PROBE_SOCKET", "kvm_usable", "probe_accel"]
