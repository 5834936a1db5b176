# -*- test-case-name: tests.integration.test_service -*-
"""
Tests for :mod:`vmservice.service` with a real daemon: the KVM probe's QEMU
(``accel: auto``; in these tests it runs paused under TCG until its timeout,
15 s, whatever the host's KVM does) never outlives the daemon, whether it is stopped
with SIGTERM or killed with SIGKILL during the probe, and a probe QEMU left
by an earlier run is swept at the next start on the same state directory.
A restarted daemon's nodes answer while it probes, and the probe's outcome
is remembered for the next start.

Only the QEMUs of each test's own state directory are looked at (their
command line names it) and only those are killed, by pid.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Callable

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from tests.integration.daemon import IMAGE_DIR, Daemon, ensure_image, processes_under
from vmservice.hypervisors.qemu import kvm_usable, probe_command
from vmservice.hypervisors.qemu.vsock_probe import open_check
from vmservice.images.store import resolve_image


def _gone(pid: int) -> bool:
    """Whether ``pid`` is no longer a live process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


#: The QEMU a probe runs in these tests (see :func:`_lasting_probes`): Python, given its path to the real one.
_PROBE_QEMU = """\
import os, sys
real, args = sys.argv[1], sys.argv[2:]
if any("vmservice.probe=1" in arg for arg in args):
    pairs = {("-accel", "kvm"): "tcg", ("-cpu", "host"): "max"}
    args = [pairs.get((args[i - 1], arg), arg) if i else arg for i, arg in enumerate(args)] + ["-S"]
os.execv(real, [real, *args])
"""


def _lasting_probes(directory: str) -> str:
    """
    A directory, in ``directory``, holding a ``qemu-system-x86_64`` under which the daemon's KVM probe runs
    until it is stopped, whatever this host's KVM does: under TCG, paused (``-S``); every other QEMU runs as
    asked.  A nested KVM may end the probe's QEMU at once (on some hosts it cannot set an MSR), before a
    test has seen it; these tests are about the daemon stopping or dying while its probe runs.
    """
    real = subprocess.run(["sh", "-c", "command -v qemu-system-x86_64"], capture_output=True, text=True,
                          check=True).stdout.strip()
    path = os.path.join(directory, "bin")
    os.mkdir(path, 0o700)
    wrapper = os.path.join(path, "qemu-system-x86_64")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} -I -c {shlex.quote(_PROBE_QEMU)} {shlex.quote(real)} \"$@\"\n")
    os.chmod(wrapper, 0o700)
    return path


def _kill_probe(pid: int) -> None:
    """SIGKILL ``pid`` if it is still a probe QEMU (a test's leftover after a failure)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"vmservice.probe=1" not in f.read():
                return
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


class ProbeTests(SynchronousTestCase):
    """The KVM probe's QEMU and the daemon's stop, kill and next start."""

    def setUp(self) -> None:
        if not kvm_usable():
            raise SkipTest("no usable /dev/kvm: the daemon never starts a KVM probe here")
        ensure_image()

    def daemon(self, **extra: object) -> Daemon:
        """
        A daemon of the test's own (``accel: auto`` unless told), stopped and removed when the test ends,
        whose KVM probe runs until it is stopped (:func:`_lasting_probes`).
        """
        daemon = Daemon(**{"accel": "auto", **extra})
        self.addCleanup(daemon.cleanup)
        daemon.environment["PATH"] = f"{_lasting_probes(daemon.root)}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return daemon

    def probes(self, daemon: Daemon) -> list[int]:
        """Pids of live QEMUs whose command line names the daemon's probe directory."""
        return [pid for pid in processes_under(os.path.join(daemon.state_dir, "probe", "")) if not _gone(pid)]

    def wait_until(self, what: str, predicate: Callable[[], object], timeout: float = 30.0) -> None:
        """Poll ``predicate`` until it is true; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def probing(self, daemon: Daemon) -> int:
        """
        Start ``daemon`` and wait for its probe QEMU: its child booting a kernel in probe mode; its pid
        (killed when the test ends if it is still that probe).
        """
        daemon.start()
        assert daemon.process is not None
        parent = daemon.process.pid

        def children() -> list[int]:
            return [pid for pid in processes_under("vmservice.probe=1")
                    if _parent(pid) == parent and not _gone(pid)]

        self.wait_until("the probe QEMU", children, 20)
        [pid] = children()
        self.addCleanup(_kill_probe, pid)
        return pid

    def test_sigterm_during_the_probe(self) -> None:
        """
        A daemon stopped with SIGTERM while its probe runs kills the probe QEMU and reaps it before it
        exits (the probe's timeout is not waited for): no QEMU of its state directory is left.
        """
        daemon = self.daemon()
        pid = self.probing(daemon)
        started = time.monotonic()
        # twistd stops its services, then ends itself with the signal it got.
        self.assertEqual(daemon.stop(signal.SIGTERM, timeout=60), -signal.SIGTERM)
        self.assertLess(time.monotonic() - started, 10)
        self.assertTrue(_gone(pid))
        self.assertEqual(processes_under(daemon.state_dir), [])
        self.assertIn("daemon stopped before the hypervisor was decided", daemon.log())

    def test_sigkill_during_the_probe(self) -> None:
        """
        A daemon killed with SIGKILL while its probe runs takes the probe QEMU with it (its parent-death
        signal), and the next daemon on the same state directory starts and decides as usual (the accelerator
        and the agent transport, each logged).
        """
        daemon = self.daemon()
        pid = self.probing(daemon)
        daemon.stop(signal.SIGKILL)
        self.wait_until("the probe QEMU to die with its daemon", lambda: _gone(pid), 5)
        self.assertEqual(self.probes(daemon), [])
        assert daemon.process is not None and daemon.process.stdout is not None
        daemon.process.stdout.close()
        daemon.config["config"]["accel"] = "tcg"
        daemon.start()
        self.wait_until("the accelerator's choice", lambda: "accelerator: tcg" in daemon.log(), 30)
        # The vsock decision is logged beside it (docs/vsock.md), as this host allows.
        expected = ("agent transport: vsock usable" if open_check() is None
                    else "agent transport: virtio-serial: no vsock: cannot open /dev/vhost-vsock")
        self.wait_until("the agent transport's decision", lambda: expected in daemon.log(), 30)

    def test_next_start_sweeps_a_left_probe(self) -> None:
        """
        A probe QEMU an earlier run left running (one the parent-death signal missed) is killed by the
        next daemon started on the same state directory, whatever its accel, before anything else.
        """
        daemon = self.daemon(accel="tcg")
        image = resolve_image(IMAGE_DIR, "default")
        directory = os.path.join(daemon.state_dir, "probe")
        os.makedirs(directory, mode=0o700)
        # What a probe of that state directory runs, under TCG and held paused (-S) so that it
        # neither finishes nor costs a core; in a session of its own, as an orphan would be.
        argv = probe_command("qemu-system-x86_64", image.kernel.path, image.initrd.path, "tcg", None,
                             os.path.join(directory, "qmp.sock"))
        left = subprocess.Popen([*argv, "-S"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(left.wait)
        self.addCleanup(lambda: left.poll() is None and left.kill())
        self.wait_until("the left probe to run", lambda: self.probes(daemon) == [left.pid], 10)
        daemon.start()
        self.assertEqual(left.wait(30), -signal.SIGKILL)
        self.assertIn(f"killed KVM probe process {left.pid}", daemon.log())
        self.assertEqual(self.probes(daemon), [])


    def test_adopts_during_the_probe_then_remembers(self) -> None:
        """
        After a ``kill -9``, the next daemon's node answers exec as soon as the API does, while that daemon
        is still probing (its outcome file removed, so it must probe again); the start after that recalls
        the outcome instead of probing: its log says so, and it starts no probe QEMU.
        """
        daemon = self.daemon()
        daemon.start()
        daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", {}, expect=201)
        first = daemon.log()
        self.assertIn("accelerator: ", first)
        outcome = os.path.join(daemon.state_dir, "probe", "outcome.json")
        self.assertEqual(os.stat(outcome).st_mode & 0o777, 0o600)
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        os.unlink(outcome)

        daemon.start()
        # No waiting loop: the agent is reconnected (or the exec waits for it) while the probe runs.
        self.assertEqual(daemon.run("demo-1", "hostname"), (0, "demo-1\n"))
        second = daemon.log()[len(first):]
        if "the KVM probe failed (no sign of life" in daemon.log():
            # This host's probe runs into its timeout (15 s): the exec was answered well before it.
            self.assertNotIn("accelerator: ", second)
        self.wait_until("the probe's outcome", lambda: "accelerator: " in daemon.log()[len(first):], 30)
        self.assertTrue(os.path.exists(outcome))
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        before = daemon.log()

        daemon.start()
        assert daemon.process is not None
        # What is held is that the outcome is recalled, not how soon (a busy machine delays any start).
        self.wait_until("the accelerator's choice", lambda: "accelerator: " in daemon.log()[len(before):], 60)
        self.assertIn("(remembered from the probe of ", daemon.log()[len(before):])
        self.assertEqual([pid for pid in processes_under("vmservice.probe=1") if _parent(pid) == daemon.process.pid], [])
        self.assertEqual(daemon.run("demo-1", "hostname"), (0, "demo-1\n"))
