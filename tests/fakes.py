"""
Fakes for the fleet's collaborators: a hypervisor driver and its machines,
agent connections, the host network and disks, each providing the interface
it stands in for (see ``tests/nodes/test_fakes.py``), recording what it is
asked and answering as told; and :class:`FleetHarness`, a fleet built on them.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping

from twisted.internet.defer import Deferred, fail, maybeDeferred, succeed
from twisted.internet.interfaces import IProtocol
from twisted.internet.testing import MemoryReactorClock
from attrs import frozen
from twisted.python.filepath import FilePath
from zope.interface import implementer

from tests.nodes.fleets import FleetKit, RecordingMetrics, fleet_of
from vmservice.config import Config, HostGroupConfig
from vmservice.devices.pci import PciHost
from vmservice.errors import AgentNotConnected, BadRequest, Conflict, NotFound
from vmservice.agent.errors import AgentUnavailable
from vmservice.agent.guest import AgentGuest
from vmservice.agent.stream import AgentStream
from vmservice.guestport.guest import AgentHealth, IGuestConnection
from vmservice.hypervisors.base import (
    Capabilities,
    HypervisorError,
    IHypervisor,
    IMachine,
    IVmProcesses,
    MachineExit,
    MachineSpec,
    NetSpec,
)
from vmservice.images.store import Image, ImageNotFound
from vmservice.network.interfaces import INodeNetwork
from vmservice.nodes.addressing import Addressing
from vmservice.nodes.events import EventHub
from vmservice.nodes.driver_choice import DriverChoice
from vmservice.nodes.runtime import NodeRuntime
from vmservice.nodes.room import RoomWatch
from vmservice.nodes.store import NodeStore
from vmservice.nodes.warm.template_files import Template
from vmservice.private_files import create_private
from vmservice.storage.interfaces import DiskInfo, IDisks
from vmservice.storage.overlay import StorageError



def _write_new(path: str, data: bytes) -> bool:
    """Write the new file ``path`` as a QEMU machine's saves do (0600; never one there already): whether it was."""
    try:
        fd = create_private(path)
    except FileExistsError:
        return False
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return True


def at_once(call: "Any") -> Deferred[Any]:
    """Runs a "blocking" call right away (the fleet's reads off the reactor, in tests)."""
    return maybeDeferred(call)


@implementer(IMachine)
class FakeMachine:
    """A VM that runs until killed or told it ended."""

    def __init__(self, spec: MachineSpec, pid: int) -> None:
        self.spec = spec
        self.pid = pid
        self._exit: MachineExit | None = None
        self._waiters: list[Deferred[MachineExit]] = []
        self.stops: list[tuple[bool, float]] = []
        self.commands: list[str] = []
        self.state = "inmigrate" if spec.incoming or spec.defer_incoming else "running"
        #: A driver action to fail, by name, with this HypervisorError message.
        self.failing: dict[str, str] = {}
        #: Deferreds that hold save_state until fired (when set).
        self.hold_save: Deferred[None] | None = None
        #: The overlays snapshot_disk switched to.
        self.snapshots: list[str] = []
        self._no_room_watchers: list[Callable[[], None]] = []

    def on_no_room(self, callback: Callable[[], None]) -> None:
        self._no_room_watchers.append(callback)
        if self.state == "io-error":
            callback()

    def no_room(self) -> None:
        """The VM stops on a write its host had no room for (QEMU's ``io-error``)."""
        self.state = "io-error"
        for watcher in list(self._no_room_watchers):
            watcher()

    def _do(self, name: str, state: str | None = None) -> Deferred[None]:
        self.commands.append(name)
        if self._exit is not None:
            return fail(HypervisorError(f"{name}: the VM is not running"))
        if name in self.failing:
            return fail(HypervisorError(self.failing[name]))
        if state is not None:
            self.state = state
        return succeed(None)

    def pause(self) -> Deferred[None]:
        return self._do("pause", "paused")

    def resume(self) -> Deferred[None]:
        return self._do("resume", "running")

    def reset(self) -> Deferred[None]:
        return self._do("reset")

    def power_button(self) -> Deferred[None]:
        return self._do("power_button")

    def run_state(self) -> Deferred[str]:
        if self._exit is not None:
            return fail(HypervisorError("gone"))
        return succeed(self.state)

    def save_state(self, path: str) -> Deferred[None]:
        d = self._do("save_state", "postmigrate")
        if self._exit is None and "save_state" not in self.failing:
            if not _write_new(path, b"state"):
                return fail(HypervisorError(f"cannot create the state file: {path} exists"))
            if self.hold_save is not None:
                return self.hold_save
        return d

    def finish_incoming(self) -> Deferred[None]:
        return self._do("finish_incoming", "paused")

    def save_device_state(self, path: str) -> Deferred[None]:
        d = self._do("save_device_state")
        if self._exit is None and "save_device_state" not in self.failing:
            if not _write_new(path, b"device state"):
                return fail(HypervisorError(f"cannot create the state file: {path} exists"))
        return d

    def snapshot_disk(self, overlay: str) -> Deferred[None]:
        self.snapshots.append(overlay)
        return self._do("snapshot_disk")

    def load_state(self, path: str) -> Deferred[None]:
        if not os.path.exists(path):
            self.failing.setdefault("load_state", f"cannot read {path}")
        return self._do("load_state", "paused")

    def load_device_state(self, path: str, resume: bool = False) -> Deferred[None]:
        if not os.path.exists(path):
            self.failing.setdefault("load_device_state", f"cannot read {path}")
        self.resumed_load = resume
        return self._do("load_device_state", "running")

    #: Whether the last load_device_state was told to resume a state saved paused.
    resumed_load = False

    @property
    def ended(self) -> Deferred[MachineExit]:
        if self._exit is not None:
            return succeed(self._exit)
        d: Deferred[MachineExit] = Deferred()
        self._waiters.append(d)
        return d

    def forget_watchers(self) -> None:
        """Whoever watched for the end stops hearing of it (their process died)."""
        self._waiters.clear()

    def end(self, exit_code: int | None = 0, signal: int | None = None, stderr: str = "") -> None:
        self._exit = MachineExit(exit_code, signal, stderr)
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.callback(self._exit)

    def kill(self) -> Deferred[MachineExit]:
        if self._exit is None:
            self.end(None, 9)
        return self.ended

    def stop(self, graceful: bool, grace: float) -> Deferred[MachineExit]:
        self.stops.append((graceful, grace))
        if graceful and self.hold_stop:
            return self.ended
        return self.kill()

    #: A graceful stop waits for :meth:`end` (the guest powering off) when set.
    hold_stop = False


@implementer(IHypervisor, IVmProcesses)
class FakeDriver:
    """
    Starts fake machines.  Machines stay in :attr:`machines` after a
    "daemon restart" (a new fleet on the same driver), so the new fleet can
    adopt the ones still running.
    """

    capabilities = Capabilities(can_pause=True, can_suspend=True)
    description = "fake"
    version = "fake 1"
    #: None: the fake host can give VMs a vsock device.
    vsock_unusable: str | None = "the fake host has no /dev/vhost-vsock"

    def __init__(self, can_suspend: bool = True) -> None:
        self.machines: list[FakeMachine] = []
        self.capabilities = Capabilities(can_pause=True, can_suspend=can_suspend)
        self.killed_orphans: list[int] = []

    def start(self, spec: MachineSpec, log_path: str | None = None) -> Deferred[IMachine]:
        machine = FakeMachine(spec, 1000 + len(self.machines))
        self.machines.append(machine)
        with open(spec.console_log, "w") as f:
            f.write("".join(f"line {i}\r\n" for i in range(1, 31)))
        return succeed(machine)

    def _alive(self, pid: int) -> FakeMachine | None:
        for machine in self.machines:
            if machine.pid == pid and machine._exit is None:
                return machine
        return None

    def adopt(self, spec: MachineSpec, pid: int, log_path: str | None = None,
              started_qmp: str | None = None) -> IMachine:
        machine = self._alive(pid)
        if machine is None or machine.spec.qmp_socket != (started_qmp or spec.qmp_socket):
            raise HypervisorError(f"process {pid} is gone")
        return machine

    def orphans(self, directory: str, depth: int = 1) -> list[int]:
        found = []
        for m in self.machines:
            parent = os.path.abspath(m.spec.qmp_socket)
            for _ in range(depth + 1):
                parent = os.path.dirname(parent)
            if m._exit is None and parent == os.path.abspath(directory):
                found.append(m.pid)
        return found

    def kill_orphan(self, pid: int) -> None:
        machine = self._alive(pid)
        if machine is not None:
            self.killed_orphans.append(pid)
            machine.kill()


@implementer(IGuestConnection)
class FakeAgent(AgentGuest):
    """
    An agent connection that becomes ready when told.  Health and clock are
    answered here; the other guest operations are the real ones of
    :class:`~vmservice.agent.guest.AgentGuest`, over a channel that has no
    streams (they fail as unavailable) unless a subclass answers
    :meth:`request` or :meth:`open_stream`.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.started = False
        self.stopped = False
        self._waiters: list[Deferred[None]] = []
        self.is_ready = False
        self.clocks: list[int] = []
        #: Health requests wait for this Deferred when set (an agent that never answers).
        self.hold_health: Deferred[None] | None = None
        self._ready_callbacks: list[Callable[[], None]] = []
        self._lost_callbacks: list[Callable[[], None]] = []
        #: The configuring requests answered: ``(header, body)``.
        self.requests: list[tuple[dict[str, Any], bytes]] = []
        #: Userdata requests wait for this Deferred when set; then they answer this exit code.
        self.hold_userdata: Deferred[None] | None = None
        self.userdata_exit_code = 0
        #: The errors :meth:`interrupt` cut the connection off with.
        self.interrupted: list[Any] = []

    @property
    def connected(self) -> bool:
        return self.is_ready

    def start(self) -> None:
        self.started = True

    def stop(self) -> Deferred[None]:
        self.stopped = True
        return succeed(None)

    def when_ready(self) -> Deferred[None]:
        if self.is_ready:
            return succeed(None)
        d: Deferred[None] = Deferred(lambda d: self._waiters.remove(d) if d in self._waiters else None)
        self._waiters.append(d)
        return d

    def ready(self) -> None:
        self.is_ready = True
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.callback(None)
        for callback in list(self._ready_callbacks):
            callback()

    def on_ready(self, callback: Callable[[], None]) -> Callable[[], None]:
        self._ready_callbacks.append(callback)
        return lambda: self._ready_callbacks.remove(callback)

    def lose(self) -> None:
        """The agent that answered is lost (its connection dropped)."""
        self.is_ready = False
        for callback in list(self._lost_callbacks):
            callback()

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        self._lost_callbacks.append(callback)
        return lambda: self._lost_callbacks.remove(callback)

    def moved_to(self, socket_path: str) -> None:
        self.path = socket_path

    def interrupt(self, error: Any) -> None:
        """The connection is cut off: recorded; the agent is lost (it comes back when told ``ready``)."""
        self.interrupted.append(error)
        if self.is_ready:
            self.lose()

    def open_stream(self, header: Mapping[str, Any], protocol: IProtocol) -> AgentStream:
        raise AgentUnavailable("the fake agent has no streams")

    async def request(self, header: Mapping[str, Any], limit: int, body: bytes = b"") -> bytes:
        """Answers the requests that configure a guest (recorded in :attr:`requests`); no others."""
        op = header.get("op")
        if not self.is_ready or op not in ("secrets", "login", "userdata"):
            raise AgentUnavailable("the fake agent answers no requests")
        self.requests.append((dict(header), body))
        if op == "secrets":
            return json.dumps({"placed": [e["name"] for e in header["entries"]], "removed": []}).encode()
        if op == "login":
            return json.dumps({"user": header["user"], "uid": 0, "home": "/root", "created": False,
                               "sshd": "started" if body else "off"}).encode()
        if self.hold_userdata is not None:
            await self.hold_userdata
        return json.dumps({"state": "finished", "exit_code": self.userdata_exit_code, "ran_script": True}).encode()

    async def set_clock(self, unix_ns: int) -> int:
        self.clocks.append(unix_ns)
        return 0

    async def health(self) -> AgentHealth:
        if not self.is_ready:
            raise AgentUnavailable("not connected")
        if self.hold_health is not None:
            await self.hold_health
        return AgentHealth(agent_uptime=5_000_000_000, agent_version="0.1.0", system_uptime=7_000_000_000, userdata_ran=False)


@implementer(INodeNetwork)
class FakeNetwork:
    """Records attachments instead of touching the host; ``failing`` makes attach fail."""

    def __init__(self) -> None:
        self.attached: dict[str, Any] = {}
        self.detached: list[str] = []
        self.cleaned: list[list[str]] = []
        self.closed = False
        self.failing: str | None = None
        self.taken_taps: list[tuple[str, str]] = []

    async def attach(self, group: HostGroupConfig, lease: Any) -> NetSpec:
        if self.failing:
            raise RuntimeError(self.failing)
        self.attached[str(lease.ip)] = lease
        netns = f"vms-{int(lease.ip):08x}" if group.network is not None and group.network.mode == "isolated" else None
        return NetSpec("tap0", "52:54:00:00:00:01", str(lease.address), str(lease.gateway), netns)

    async def take_tap(self, group: HostGroupConfig, lease: Any, tap: str) -> None:
        if self.failing:
            raise RuntimeError(self.failing)
        self.taken_taps.append((str(lease.ip), tap))

    async def detach(self, network: Any, ip: Any) -> None:
        self.detached.append(str(ip))
        self.attached.pop(str(ip), None)

    async def clean_orphans(self, keep: Any) -> list[str]:
        self.cleaned.append(sorted(str(ip) for ip in keep()))
        return []

    async def close(self) -> None:
        self.closed = True


@implementer(IDisks)
class FakeDisks:
    """Disks as small files."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self._made: dict[str, tuple[str, int]] = {}
        #: When set, creating a disk fails with a StorageError of this message (as qemu-img's failure).
        self.failing: str | None = None

    async def create(self, base: str, path: str, size_bytes: int) -> None:
        if self.failing is not None:
            raise StorageError(self.failing)
        with open(path, "wb") as f:
            f.write(b"disk")
        self.created.append(path)
        self._made[path] = (base, size_bytes)

    def info(self, path: str) -> DiskInfo | None:
        """A qcow2 of the size asked for over the base it was made on, 4 bytes used (while the file is there)."""
        if not os.path.exists(path) or path not in self._made:
            return None
        base, size_bytes = self._made[path]
        return DiskInfo(path, "qcow2", size_bytes, 4, base)

    def remove(self, path: str) -> bool:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return True


def fake_image(directory: str, name: str = "default") -> Image:
    root = FilePath(directory)
    for file in ("vmlinux", "initrd.img", "rootfs.ext4"):
        root.child(file).setContent(b"x")
    manifest = {"name": name, "source": f"recipe:{name}", "built_at": "2026-01-02T03:04:05+00:00"}
    root.child("manifest.json").setContent(json.dumps(manifest).encode())
    return Image(name, root, root.child("vmlinux"), root.child("initrd.img"), root.child("rootfs.ext4"), manifest)


def empty_overlay_base(disks: FakeDisks, template: Template) -> str | None:
    """What the fake disks made ``template``'s empty overlay over (made under a name of its own, then renamed)."""
    bases = {base for path, (base, _) in disks._made.items() if path.startswith(template.empty_overlay + ".")}
    return bases.pop() if len(bases) == 1 else None


@frozen
class FakeSecretMeta:
    permissions: int = 0o600
    uid: int = 0
    gid: int = 0


@frozen
class FakeSecret:
    meta: FakeSecretMeta
    data: bytes


class FakeSecrets:
    """A secrets store in memory: ``put`` and ``delete`` tell the subscribers, as the real one does."""

    def __init__(self) -> None:
        self.secrets: dict[str, FakeSecret] = {}
        self._subscribers: list[Callable[[str], None]] = []

    def put(self, name: str, data: bytes, permissions: int = 0o600, uid: int = 0, gid: int = 0) -> None:
        self.secrets[name] = FakeSecret(FakeSecretMeta(permissions, uid, gid), data)
        for callback in list(self._subscribers):
            callback(name)

    def delete(self, name: str) -> None:
        del self.secrets[name]
        for callback in list(self._subscribers):
            callback(name)

    def get(self, name: str) -> FakeSecret:
        try:
            return self.secrets[name]
        except KeyError:
            raise NotFound(f"secret {name!r} not found", code="secret_not_found") from None

    def resolve(self, names: Any) -> tuple[FakeSecret, ...]:
        unknown = [name for name in names if name not in self.secrets]
        if unknown:
            raise BadRequest(f"unknown secrets: {', '.join(unknown)}", code="unknown_secret")
        return tuple(self.secrets[name] for name in names)

    def subscribe(self, callback: Callable[[str], None]) -> Callable[[], None]:
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)


class FleetHarness:
    """A fleet on fakes, with a clock and everything it created reachable."""

    def __init__(
        self,
        state_dir: str,
        groups: tuple[HostGroupConfig, ...] | None = None,
        driver: FakeDriver | None = None,
        network: FakeNetwork | None = None,
        codehost: dict[str, tuple[str, ...]] | None = None,
        pci: PciHost | None = None,
    ) -> None:
        self.reactor = MemoryReactorClock()
        self.secrets = FakeSecrets()
        #: The keys of code-host users; None: no code host configured.
        self.codehost = codehost
        self.driver = driver or FakeDriver()
        self.disks = FakeDisks()
        self.network = network or FakeNetwork()
        self.agents: list[FakeAgent] = []
        #: The ``agent_transport`` each agent connection was made with.
        self.transports: list[str] = []
        #: What the fleet measured (boots and restores read as the two lists below).
        self.metrics = RecordingMetrics()
        self.boots: list[tuple[str, float]] = self.metrics.boots
        self.restores: list[tuple[str, float]] = self.metrics.restores
        #: The fleet's lifecycle events, timed by the harness's clock.
        self.events = EventHub(self.reactor.seconds)
        os.makedirs(os.path.join(state_dir, "image"), exist_ok=True)
        self.image = fake_image(os.path.join(state_dir, "image"))
        # A second image, "dev", in an image directory of the store's layout (for the image listing).
        images = os.path.join(state_dir, "images")
        os.makedirs(os.path.join(images, "dev-1111111111111111"), exist_ok=True)
        self.dev_image = fake_image(os.path.join(images, "dev-1111111111111111"), "dev")
        if not os.path.lexists(os.path.join(images, "dev")):
            os.symlink("dev-1111111111111111", os.path.join(images, "dev"))
        self.config = Config(
            state_dir=state_dir,
            image_dir=images,
            host_groups=groups
            or (
                HostGroupConfig(name="demo", vcpu=2, ram_bytes=512 * 1024 * 1024),
                HostGroupConfig(name="other", vcpu=1, ram_bytes=256 * 1024 * 1024),
            ),
        )
        self.store = NodeStore(state_dir)
        #: The bytes the state directory has free, as the fleet's RoomWatch sees them.
        self.free = 1 << 40
        self.room = RoomWatch(self.reactor, state_dir, free=lambda path: self.free)
        self.parts = FleetKit(
            clock=self.reactor,
            config=self.config,
            store=self.store,
            driver=DriverChoice(lambda: succeed(self.driver)),
            vms=self.driver,
            images=self._images,
            disks=self.disks,
            agents=self._agent,
            addressing=Addressing(self.config, self.network),
            blocking=at_once,
            secrets=self.secrets,
            codehost_keys=self._codehost_keys if codehost is not None else None,
            metrics=self.metrics,
            events=self.events,
            wall_clock=lambda: 1_700_000_000_000_000_000,
            # An empty tree of the test's own unless given: never the host's.
            pci=pci or PciHost(os.path.join(state_dir, "sys"), os.path.join(state_dir, "dev")),
            room=self.room,
        )
        self.fleet = fleet_of(self.parts)

    def node(self, hostname: str) -> NodeRuntime:
        """The fleet's run-time side of node ``hostname`` (for tests that look inside)."""
        return self.fleet._registry.find(hostname)

    def crash(self) -> None:
        """
        Make the fleet's process "die" (``kill -9``): its machines keep
        running, and nothing they do reaches it any more.  A new harness on
        the same state directory and driver is the next daemon.
        """
        for machine in self.driver.machines:
            machine.forget_watchers()

    def _images(self, name: str) -> Image:
        if name == "dev":
            return self.dev_image
        if name != "default":
            raise ImageNotFound(name, "/nowhere", "never built")
        return self.image

    def _codehost_keys(self, user: str) -> Deferred[tuple[str, ...]]:
        assert self.codehost is not None
        if user not in self.codehost:
            return fail(BadRequest(f"code host user {user!r} not found", code="codehost_user_has_no_keys"))
        return succeed(self.codehost[user])

    def _agent(self, path: str, transport: str = "virtio-serial") -> FakeAgent:
        agent = FakeAgent(path)
        self.transports.append(transport)
        self.agents.append(agent)
        return agent


class OneNodeFleet:
    """
    A fleet of one running node, ``demo-1``, whose guest is
    :class:`~tests.agent.fakes.FakeExecAgent`: the real guest operations over
    fake agent streams the test drives.  ``state`` makes the node ``paused``
    or its agent ``down``.
    """

    def __init__(self) -> None:
        from tests.agent.fakes import FakeExecAgent

        self.agent = FakeExecAgent()
        self.state = "running"

    async def guest(self, hostname: str) -> Any:
        if hostname != "demo-1":
            raise NotFound(f"no node {hostname!r}", code="node_not_found")
        if self.state == "paused":
            raise Conflict("paused", code="paused")
        if self.state == "down":
            raise AgentNotConnected("not connected")
        return self.agent


__all__ = [
    "OneNodeFleet","FleetHarness", "FakeAgent", "FakeDriver", "FakeMachine", "FakeDisks", "FakeNetwork"]
