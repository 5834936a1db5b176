# -*- test-case-name: tests.integration.test_vsock -*-
"""
The AF_VSOCK agent transport with real guests (``docs/vsock.md``).

- :class:`LoopbackTests` run everywhere: a guest booted with
  ``vmservice.vsock=1`` but, on a host without ``/dev/vhost-vsock``, no vsock
  device loads the vsock modules (``vsock_loopback`` too) and its agent
  listens on vsock port 700 beside its serial port.  A small standard-library
  client in the guest connects to CID 1 (the guest's own loopback), port 700,
  and speaks the agent protocol's HELLO and PING with the shared codec
  (:mod:`vmservice.wire`); it waits in the listener's backlog while the host's
  serial session holds the agent's one session slot, and is served once the
  host leaves.
- :class:`VhostVsockTests` run where ``/dev/vhost-vsock`` exists: a VM with a
  vhost-vsock device whose agent the daemon's client reaches over vsock only,
  through which an exec runs.  Elsewhere they are skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.integration.hypervisors.tcg import BOOT_TIMEOUT
from vmservice.agent.client import AgentClient
from vmservice.agent.execution import ExecOutcome, run_collected
from vmservice.agent.vsock import VsockAddress
from vmservice.guestport.exec import ExecRequest
from vmservice.hypervisors.base import IMachine, MachineSpec
from vmservice.hypervisors.qemu import QemuDriver, QemuSettings, host_tsc_khz
from vmservice.hypervisors.cid_file import read_cid
from vmservice.hypervisors.qemu.vsock_probe import VHOST_VSOCK, open_check
from vmservice.images.build import build_image
from vmservice.images.store import default_image_dir
from vmservice.service.agents import agent_client
from vmservice.storage.overlay import create_overlay

#: Where the guest's client writes what it saw.
RESULT = "/tmp/vsock-loopback.txt"

#: The guest's client: leaves the exec at once (a child in a session of its own), then connects to its
#: own agent over the vsock loopback and writes what the HELLO and PING exchange gave.
CLIENT = f"""
import os, socket, sys, time
if os.fork():
    os._exit(0)
os.setsid()
sys.path.insert(0, "/opt/vmservice")
from vmservice.wire import NEED_DATA, Connection, Hello, Ping, Pong, Role
out = open({RESULT!r} + ".new", "w")
start = time.monotonic()
try:
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect((1, 700))
    host = Connection(Role.HOST)
    s.sendall(host.send(host.hello("loopback-test")))
    seen = []
    while not (host.established and Hello in seen):
        data = s.recv(65536)
        if not data:
            raise SystemExit("closed before HELLO")
        host.receive_data(data)
        for event in iter(host.next_event, NEED_DATA):
            seen.append(type(event))
            if isinstance(event, Hello) and host.hello_wanted:
                s.sendall(host.send(host.hello("loopback-test")))
    served = time.monotonic() - start
    s.sendall(host.send(Ping(b"vsock-lo")))
    pong = False
    while not pong:
        data = s.recv(65536)
        if not data:
            raise SystemExit("closed before PONG")
        host.receive_data(data)
        pong = Pong(b"vsock-lo") in list(iter(host.next_event, NEED_DATA))
    out.write(f"PONG peer={{s.getpeername()}} waited={{served:.1f}}\\n")
    s.close()
except BaseException as error:
    out.write(f"FAILED {{error!r}}\\n")
out.close()
os.rename({RESULT!r} + ".new", {RESULT!r})
"""


class _Guest(TestCase):
    """A real QEMU (TCG) of the built image, its files in a short temporary directory."""

    timeout = 4 * BOOT_TIMEOUT

    def setUp(self) -> None:
        self.image = build_image(default_image_dir(), out=lambda line: None)
        self.workdir = tempfile.mkdtemp(prefix="vms-vsock-", dir="/tmp")  # short: UNIX socket paths
        self.addCleanup(shutil.rmtree, self.workdir, True)

    def path(self, name: str) -> str:
        return os.path.join(self.workdir, name)

    async def boot(self, driver_vsock_unusable: str | None) -> tuple[IMachine, MachineSpec]:
        spec = MachineSpec(
            name="vsock-1", vcpus=1, ram_bytes=256 << 20, kernel=self.image.kernel.path,
            initrd=self.image.initrd.path, disk=self.path("disk.qcow2"), agent_socket=self.path("agent.sock"),
            qmp_socket=self.path("qmp.sock"), console_log=self.path("console.log"), vsock=True,
        )
        await Deferred.fromCoroutine(create_overlay(global_reactor, self.image.rootfs.path, spec.disk, 2 << 30))
        with open("/proc/cpuinfo") as f:
            settings = QemuSettings(accel="tcg", tsc_khz=host_tsc_khz(f.read()))
        driver = QemuDriver(global_reactor, settings, vsock_unusable=driver_vsock_unusable)
        machine = await driver.start(spec, self.path("qemu.log"))
        self.addCleanup(machine.kill)
        return machine, spec

    async def ready(self, client: AgentClient) -> AgentClient:
        client.start()
        self.addCleanup(client.stop)
        waiting = client.when_ready()
        timer = global_reactor.callLater(BOOT_TIMEOUT, waiting.cancel)
        try:
            await waiting
        finally:
            if timer.active():
                timer.cancel()
        return client

    async def execute(self, client: AgentClient, *argv: str) -> ExecOutcome:
        return await run_collected(client, ExecRequest(cmd=argv[0], args=tuple(argv[1:])), global_reactor)

    def console(self) -> str:
        try:
            with open(self.path("console.log"), "rb") as stream:
                return stream.read().decode("utf-8", "replace")[-3000:]
        except FileNotFoundError:
            return ""


class LoopbackTests(_Guest):
    async def test_listener_over_loopback(self) -> None:
        """
        With vmservice.vsock=1 and no device, the guest loads the vsock modules and the loopback; its
        agent's vsock listener answers HELLO and PING on CID 1 once the serial session has left the slot.
        """
        _, spec = await self.boot("no device on purpose: the guest's own loopback is tested")
        self.assertIsNone(read_cid(spec.agent_socket))
        client = await self.ready(AgentClient(global_reactor, spec.agent_socket))
        modules = await self.execute(client, "/bin/sh", "-c", "cut -d' ' -f1 /proc/modules; cat /proc/cmdline")
        words = modules.stdout.decode().split()
        self.assertIn("vmservice.vsock=1", words)
        self.assertLessEqual({"vsock", "vsock_loopback", "vmw_vsock_virtio_transport"}, set(words), words)
        started = await self.execute(client, "/usr/bin/python3.11", "-I", "-S", "-c", CLIENT)
        self.assertEqual(started.exit_code, 0, started.stderr)
        # The guest's client waits in the backlog while this serial session holds the slot.
        await deferLater(global_reactor, 2.0, lambda: None)
        waiting = await self.execute(client, "/bin/sh", "-c", f"cat {RESULT} 2>/dev/null || echo none")
        self.assertEqual(waiting.stdout.strip(), b"none")
        await client.stop()
        # The slot is free: the guest's client is served, ends, and frees it again for the host.
        await deferLater(global_reactor, 5.0, lambda: None)
        again = await self.ready(AgentClient(global_reactor, spec.agent_socket))
        result = await self.execute(again, "/bin/sh", "-c", f"cat {RESULT}")
        self.assertTrue(result.stdout.startswith(b"PONG peer=(1, 700) "), (result.stdout, result.stderr, self.console()))


def _vhost_vsock_missing() -> str | None:
    reason = open_check()
    if reason is None:
        return None
    return (f"{reason}: this host cannot give a VM a vhost-vsock device (load the vhost_vsock module on a KVM "
            f"host and let the daemon's user open {VHOST_VSOCK}; see docs/vsock.md)")


class VhostVsockTests(_Guest):
    async def test_exec_over_vsock(self) -> None:
        """A VM with a vhost-vsock device: the client for agent_transport: vsock connects over vsock and runs an exec."""
        _, spec = await self.boot(None)
        cid = read_cid(spec.agent_socket)
        self.assertIsNotNone(cid)
        client = await self.ready(agent_client(global_reactor, spec.agent_socket, "vsock", None))  # type: ignore[arg-type]
        protocol = client._protocol
        assert protocol is not None and protocol.transport is not None
        self.assertEqual(protocol.transport.getPeer(), VsockAddress(cid, 700))  # type: ignore[arg-type]
        outcome = await self.execute(client, "/bin/sh", "-c", "echo over-vsock")
        self.assertEqual((outcome.exit_code, outcome.stdout), (0, b"over-vsock\n"), self.console())

    if _vhost_vsock_missing() is not None:
        test_exec_over_vsock.skip = _vhost_vsock_missing()  # type: ignore[attr-defined]
