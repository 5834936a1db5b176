# -*- test-case-name: tests.hypervisors.test_probe_memory -*-
"""
The KVM probe's outcome, remembered in the state directory so that a restart
does not boot the probe guest again (15 s on a host whose KVM cannot run a
guest, which the first create used to wait for).

The outcome is kept with a key of everything it depends on: the host kernel
and its boot (a reboot may load KVM with other parameters), the KVM device
node (a reloaded module makes a new one), the QEMU build, and the guest
kernel and initramfs the probe boots.  It is used only while the key still
matches; anything else about the file (missing, unreadable, too large, not
JSON, another key) means "probe again".  The file is the daemon's own: 0600
in the probe's 0700 directory, never followed through a link.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Callable

from attrs import frozen

from ..durable import write_atomic
from .file_identity import binary_identity, file_identity
from .qemu.probe import AccelChoice

#: The remembered outcome's file, in the probe's directory.
OUTCOME_FILE = "outcome.json"
#: What a remembered outcome may take: it is a key and two short strings.
MAX_SIZE = 4096
#: The longest reason kept (a QEMU exit's description can be long).
MAX_REASON = 1000
#: Changes when what the key covers changes, so an older file is not trusted.
FORMAT = 1


def _device_identity(path: str) -> list[object] | None:
    """A device node's number, inode and change time (``None`` when it is missing)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [info.st_rdev, info.st_ino, info.st_ctime_ns]


def _boot_id(path: str) -> str:
    try:
        with open(path) as f:
            return f.read(64).strip()
    except OSError:
        return ""


def probe_key(
    binary: str,
    kernel: str,
    initrd: str,
    *,
    kvm_path: str = "/dev/kvm",
    boot_id_path: str = "/proc/sys/kernel/random/boot_id",
    qemu_identity: Callable[[str], str] = binary_identity,
) -> str:
    """
    The key of everything the probe's outcome depends on, as a hex digest.

    :param binary: the QEMU system emulator the probe runs.
    :param kernel: the guest kernel it boots.
    :param initrd: the initramfs it boots.
    :param kvm_path: the KVM device.
    :param boot_id_path: the kernel's random id of this boot.
    :param qemu_identity: what identifies the QEMU build (its real path,
        size and modification time).
    """
    uname = os.uname()
    facts = {
        "format": FORMAT,
        "host": [uname.release, uname.version, _boot_id(boot_id_path)],
        "kvm": _device_identity(kvm_path),
        "qemu": qemu_identity(binary),
        "guest": [file_identity(kernel), file_identity(initrd)],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


@frozen
class ProbeMemory:
    """
    The remembered outcome of the probe for one key.

    :ivar directory: the probe's directory (0700, the daemon's).
    :ivar key: :func:`probe_key` as it is now.
    """

    directory: str
    key: str

    @property
    def path(self) -> str:
        return os.path.join(self.directory, OUTCOME_FILE)

    def recall(self) -> AccelChoice | None:
        """The outcome kept for this key, or ``None`` when there is none to trust."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            data = os.read(fd, MAX_SIZE + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) > MAX_SIZE:
            return None
        try:
            kept = json.loads(data)
        except ValueError:
            return None
        if not isinstance(kept, dict) or kept.get("key") != self.key:
            return None
        accel, reason = kept.get("accel"), kept.get("reason")
        if accel not in ("kvm", "tcg") or not isinstance(reason, str) or not isinstance(kept.get("at"), str):
            return None
        return AccelChoice(accel, f"{reason} (remembered from the probe of {kept['at']})")

    def keep(self, choice: AccelChoice, at: str) -> None:
        """
        Keep ``choice`` for this key (0600, written whole).

        :param at: when the probe ran, as the log should say it.
        :raise OSError: it cannot be written (the next start probes again).
        """
        body = {"key": self.key, "accel": choice.accel, "reason": choice.reason[:MAX_REASON], "at": at}
        write_atomic(self.path, json.dumps(body).encode())


__all__ = ["MAX_SIZE", "OUTCOME_FILE", "ProbeMemory", "probe_key"]
