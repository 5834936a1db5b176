# -*- test-case-name: tests.integration.images.test_boot -*-
"""
Integration tests: build the real image (cached in ``$VMSERVICE_IMAGE_DIR`` or
``/var/cache/vmservice/images``) and boot it with QEMU under TCG, the way the daemon's driver does.

They are the only tests here that fetch packages and start QEMU. Every QEMU started is killed by its pid in a cleanup,
and every file lives in a temporary directory removed afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

from twisted.trial.unittest import SynchronousTestCase

from vmservice.images.build import build_image
from vmservice.images.store import Image, default_image_dir

BOOT_TIMEOUT = 60.0
EXIT_TIMEOUT = 30.0


def tsc_khz() -> int:
    """The host's TSC frequency in kHz, from /proc/cpuinfo: microvm guests need it (no HPET to calibrate)."""
    with open("/proc/cpuinfo") as stream:
        for line in stream:
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    raise RuntimeError("no 'cpu MHz' in /proc/cpuinfo")


def qemu_command(image: Image, workdir: str, append: str, disk: str | None) -> list[str]:
    """The microvm command line of the brief: serial console to a file, agent port and QMP on sockets."""
    command = [
        "qemu-system-x86_64", "-machine", "microvm", "-accel", "tcg", "-cpu", "max", "-m", "256", "-smp", "1",
        "-nodefaults", "-no-user-config", "-display", "none",
        "-kernel", image.kernel.path, "-initrd", image.initrd.path,
        "-append", f"console=ttyS0 root=/dev/vda rw tsc_early_khz={tsc_khz()} {append}",
        "-device", "virtio-serial-device",
        "-chardev", f"socket,id=agent,path={workdir}/agent.sock,server=on,wait=off",
        "-device", "virtserialport,chardev=agent,name=agent",
        "-serial", f"file:{workdir}/console.log", "-no-reboot",
        "-qmp", f"unix:{workdir}/qmp.sock,server=on,wait=off",
    ]
    if disk is not None:
        command += ["-drive", f"id=root,file={disk},format=qcow2,if=none", "-device", "virtio-blk-device,drive=root"]
    return command


class Guest:
    """
    One QEMU process and its console, agent and QMP sockets in ``workdir``.
    """

    def __init__(self, test: SynchronousTestCase, image: Image, workdir: str, append: str,
                 disk: str | None) -> None:
        self.workdir = workdir
        self.console_path = os.path.join(workdir, "console.log")
        if os.path.exists(self.console_path):
            os.unlink(self.console_path)
        self.started = time.monotonic()
        self.process = subprocess.Popen(qemu_command(image, workdir, append, disk), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        test.addCleanup(self.kill)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def console(self) -> str:
        try:
            with open(self.console_path, "rb") as stream:
                return stream.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def wait_for_console(self, text: str, timeout: float = BOOT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.console():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not on the console (QEMU exit status {self.process.poll()}):\n"
                                     + self.console()[-3000:])
            time.sleep(0.05)

    def first_agent_bytes(self, timeout: float = BOOT_TIMEOUT) -> float:
        """Connect to the agent's port and return the seconds from QEMU's start to its first bytes."""
        path = os.path.join(self.workdir, "agent.sock")
        deadline = time.monotonic() + timeout
        with socket.socket(socket.AF_UNIX) as connection:
            while True:
                try:
                    connection.connect(path)
                    break
                except OSError:
                    if time.monotonic() > deadline or self.process.poll() is not None:
                        raise
                    time.sleep(0.02)
            connection.settimeout(max(deadline - time.monotonic(), 0.1))
            data = connection.recv(64)
        if not data:
            raise AssertionError("the agent port closed without a byte:\n" + self.console()[-3000:])
        return time.monotonic() - self.started

    def power_down(self) -> int:
        """
        Press the ACPI power button over QMP until QEMU exits (the guest's watcher may not be listening
        yet when the first press arrives), and return QEMU's exit status.
        """
        with socket.socket(socket.AF_UNIX) as qmp:
            qmp.connect(os.path.join(self.workdir, "qmp.sock"))
            reader = qmp.makefile("rb")
            json.loads(reader.readline())
            qmp.sendall(b'{"execute": "qmp_capabilities"}\n')
            json.loads(reader.readline())
            deadline = time.monotonic() + EXIT_TIMEOUT
            while self.process.poll() is None and time.monotonic() < deadline:
                try:
                    qmp.sendall(b'{"execute": "system_powerdown"}\n')
                except OSError:
                    break
                try:
                    return self.process.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    continue
            reader.close()
        try:
            return self.process.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            raise AssertionError("QEMU did not exit after system_powerdown:\n" + self.console()[-3000:]) from None


def ext4_of(test: SynchronousTestCase, overlay: str, workdir: str) -> tuple[str, dict[str, str]]:
    """Flatten the overlay to a raw image; return its path and its ext4 superblock fields."""
    raw = os.path.join(workdir, "flat.raw")
    subprocess.run(["qemu-img", "convert", "-O", "raw", overlay, raw], check=True)
    header = subprocess.run(["dumpe2fs", "-h", raw], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            check=True, text=True).stdout
    fields = {key.strip(): value.strip() for key, _, value in
              (line.partition(":") for line in header.splitlines()) if value}
    return raw, fields


def debugfs_link(raw: str, path: str) -> str:
    """Where the symbolic link ``path`` of the file system ``raw`` points ("" when it is none)."""
    shown = subprocess.run(["debugfs", "-R", f"stat {path}", raw], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           check=True, text=True).stdout
    match = re.search(r'Fast link dest: "([^"]*)"', shown)
    return match.group(1) if match else ""


class BootTests(SynchronousTestCase):
    """
    The built image boots on microvm under TCG.
    """

    def setUp(self) -> None:
        self.image = build_image(default_image_dir(), out=lambda line: None)
        self.workdir = tempfile.mkdtemp(prefix="vms-image-", dir="/tmp")  # short: UNIX socket paths
        self.addCleanup(shutil.rmtree, self.workdir, True)

    def test_probe(self) -> None:
        """
        With ``vmservice.probe=1`` and no disk, the initramfs prints VMSERVICE_PROBE_OK and powers off, and
        QEMU exits by itself with status 0.
        """
        guest = Guest(self, self.image, self.workdir, "vmservice.probe=1", disk=None)
        guest.wait_for_console("VMSERVICE_PROBE_OK")
        self.assertEqual(guest.process.wait(timeout=EXIT_TIMEOUT), 0)
        self.assertNotIn("vmservice-init: loading modules", guest.console())

    def test_boot_persist_and_power_off(self) -> None:
        """
        A node boots from a qcow2 overlay of the image: init prints its steps, starts the agent (which sends
        its first bytes on the port and then grows the file system to the 2 GiB disk), and powers off cleanly
        on the ACPI power button. The overlay then holds a clean file system of 2 GiB, mounted once, whose
        /etc/hostname is a link into /run (the guest writes it there, not onto its disk). A second boot of
        the same overlay sees the grown file system (no second resize), takes the new host name and
        leaves the file system clean, mounted twice.
        """
        overlay = os.path.join(self.workdir, "overlay.qcow2")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", self.image.rootfs.path, "-F", "raw",
                        overlay, "2G"], check=True)

        first = Guest(self, self.image, self.workdir, "vmservice.hostname=t1", overlay)
        seconds = first.first_agent_bytes()
        first.wait_for_console("vmservice-init: starting services")
        # The agent grows the file system once it is up (at most a second later when nothing asks it).
        first.wait_for_console("vmservice-init: growing /dev/vda")
        self.assertEqual(first.power_down(), 0)
        console = first.console()
        for step in ("vmservice-init: loading modules", "vmservice-init: mounting /dev/vda (rw)",
                     "vmservice-init: switching to /dev/vda", "vmservice-init: mounting file systems",
                     "vmservice-init: hostname t1", "vmservice-init: growing /dev/vda",
                     "vmservice-init: power button pressed", "vmservice-init: syncing disks"):
            self.assertIn(step, console)
        self.assertNotIn("vmservice-init: error", console)
        self.assertNotIn("warning", console.split("switching to /dev/vda", 1)[1])

        raw, fields = ext4_of(self, overlay, self.workdir)
        self.assertEqual(fields["Filesystem state"], "clean")
        self.assertEqual(int(fields["Block count"]) * int(fields["Block size"]), 2 * 1024 ** 3)
        self.assertEqual(fields["Mount count"], "1")
        self.assertEqual(debugfs_link(raw, "/etc/hostname"), "../run/vmservice/hostname")
        os.unlink(raw)

        second = Guest(self, self.image, self.workdir, "vmservice.hostname=t2", overlay)
        second.wait_for_console("vmservice-init: starting services")
        self.assertEqual(second.power_down(), 0)
        self.assertIn("vmservice-init: hostname t2", second.console())
        self.assertNotIn("growing", second.console())
        raw, fields = ext4_of(self, overlay, self.workdir)
        self.assertEqual(fields["Mount count"], "2")
        self.assertEqual(fields["Filesystem state"], "clean")
        print(f"\nfirst agent bytes {seconds:.1f} s after QEMU started")
