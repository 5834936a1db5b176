# -*- test-case-name: tests.test_service -*-
"""
Assembling the daemon: configuration in, a ``MultiService`` out.

The service holds the fleet (which stops every VM when the daemon stops) and
the API listener (which stops first, so no request arrives while VMs go).
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections import Counter
from typing import Any, Callable, Mapping

from treq.client import HTTPClient
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint, UNIXServerEndpoint
from twisted.internet.interfaces import IReactorTCP, IStreamServerEndpoint
from twisted.logger import Logger
from twisted.web.client import Agent

from .agent.client import AgentClient, ClientReactor
from .agent.metrics import MetricsClient
from .api.app import Api
from .api.connection_limits import ConnectionLimits
from .api.resources import every_route
from .api.streaming import StreamingSite
from .audit import AuditLog
from .auth import IWatchReactor, TokenFileError, Tokens, TokenWatch, create_token_file, token_path
from .buffer_budget import BufferBudget, default_size
from .codehost import CodeHost
from .config import Config
from .listening import listening_service
from .hypervisors.base import IHypervisor
from .hypervisors.probe_memory import ProbeMemory, probe_key
from .hypervisors.qemu import (
    IProbeReactor, IQemuReactor, QemuDriver, QemuProcesses, QemuSettings, host_tsc_khz, probe_accel, sweep_probes,
)
from .images.store import Image, ImageNotFound, resolve_image
from .metrics import STATUSES, Metrics
from .nodestats_metrics import NodeStatsCollector, SnapshotSampler
from .network.claims import RangeClaims, RangeTaken
from .network.host import HostNetwork, command_runner
from .network.ipam import pool
from .nodes.addressing import Addressing
from .nodes.admission import Admission, limits, mem_total
from .nodes.background_limit import BackgroundLimit
from .nodes.console_rotation import ConsoleRotation
from .nodes.room import RoomWatch
from .nodes.fleet import Fleet
from .nodes.adoption import IdentityAdoption
from .nodes.fork_memory import memory_directory
from .nodes.templates import TemplateStore, ram_directory
from .nodes.events import EventHub
from .nodes.parts import DriverChoice, FleetParts
from .nodes.store import NodeStore, StateDirectoryInUse
from .private_files import NotPrivate, private_directory, tighten
from .secretstore import SecretStore
from .storage.overlay import OverlayDisks

log = Logger()


class IDaemonReactor(IQemuReactor, IProbeReactor, ClientReactor, IReactorTCP, IWatchReactor):
    """
    What the daemon needs of its reactor: QEMU children and their sockets and
    pidfds (:class:`~vmservice.hypervisors.qemu.IQemuReactor`), TCP and UNIX
    listeners, threads for file reads off the loop.  Twisted's reactors
    provide each part; this combination only names them for the type checker.
    """


class StartupError(Exception):
    """The daemon cannot start; the message is one line for the operator."""


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


def _endpoint(reactor: IDaemonReactor, config: Config) -> IStreamServerEndpoint:
    api = config.api
    if api.unix_socket_path is not None:
        return UNIXServerEndpoint(reactor, api.unix_socket_path, mode=0o660, wantPID=True)
    if ipaddress.ip_address(api.bind_address).version == 6:
        return TCP6ServerEndpoint(reactor, api.port, interface=api.bind_address)
    return TCP4ServerEndpoint(reactor, api.port, interface=api.bind_address)


class _Claimed(MultiService):
    """
    Holds the daemon's host-wide range claims around its children (the
    fleet): the claims are released only once every VM is stopped and
    detached, so no other daemon can take the ranges while they are in use.
    """

    def __init__(self, claims: RangeClaims) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Twisted's MultiService is not annotated
        self._claims = claims

    def stopService(self) -> Deferred[None]:
        stopped: Deferred[None] = super().stopService()  # type: ignore[no-untyped-call]  # Twisted's MultiService is not annotated

        def release(result: object) -> object:
            self._claims.release()
            return result

        return stopped.addBoth(release)


def _claim_ranges(config: Config) -> RangeClaims:
    """
    Claim the network ranges of every group host-wide, so that a second
    daemon with an overlapping range (or on the same state directory)
    refuses to start.
    """
    claims = RangeClaims()
    ranges = [pool(g.network) for g in config.host_groups if g.network is not None]
    try:
        claims.claim(ranges, os.path.abspath(config.state_dir))
    except (RangeTaken, OSError) as error:
        raise StartupError(f"network ranges: {error}") from None
    return claims


def _codehost(config: Config, reactor: IDaemonReactor) -> Callable[[str], Deferred[tuple[str, ...]]] | None:
    """What fetches a ``codehost_user``'s keys from ``codehost_url``; ``None`` when it is disabled."""
    if config.codehost_url is None:
        return None
    # No connect timeout of its own: CodeHost's timeout covers the whole fetch and cancels the attempt.
    client = HTTPClient(Agent(reactor))
    return CodeHost(reactor, client, config.codehost_url, config.codehost_timeout).public_keys


def _snapshots(reactor: IDaemonReactor) -> Callable[[str, float], Deferred[Mapping[str, Any]]]:
    """What asks a node's metrics agent for a snapshot."""
    client = MetricsClient(reactor)
    return lambda socket, deadline: Deferred.fromCoroutine(client.snapshot(socket, deadline))


def _buffer_budget(config: Config) -> BufferBudget:
    """The buffer budget, its default size from this host's RAM (``/proc/meminfo``)."""
    size = config.limits.buffer_budget
    if size is None:
        try:
            with open("/proc/meminfo") as f:
                total = mem_total(f.read())
        except OSError:
            total = None
        size = default_size(total)
    log.info(
        "limits: buffer budget {budget} MiB, {execs} background execs per node, {most} connections "
        "({per_peer} per client)", budget=size // 2**20, execs=config.limits.background_execs_per_node,
        most=config.limits.max_connections, per_peer=config.limits.max_connections_per_peer,
    )
    return BufferBudget(size)


def _admission(config: Config, reactor: IDaemonReactor) -> Admission:
    """Admission with its defaults from this host's RAM (``/proc/meminfo``) and CPU count."""
    try:
        with open("/proc/meminfo") as f:
            meminfo: str | None = f.read()
    except OSError:
        meminfo = None
    allowed = limits(config, meminfo, os.cpu_count())
    log.info(
        "admission: memory budget {budget} ({explained}), {overhead} MiB per VM beyond its RAM, "
        "cold boots at once: {boots}",
        budget="none" if allowed.budget is None else f"{allowed.budget // 2**20} MiB", explained=allowed.explained,
        overhead=allowed.overhead // 2**20, boots=allowed.boot_concurrency or "no bound",
    )
    return Admission(reactor, allowed)


def _keep_private(config: Config) -> None:
    """
    At each start, with the state directory taken: the daemon's directories
    in the tmpfs, whose names others can predict, made or verified as its own
    alone, and the modes of every file under them and the state directory
    tightened (what an earlier version or umask left); see docs/security.md.

    :raise StartupError: a tmpfs directory is not the daemon's alone.
    """
    tmpfs = (ram_directory(config.state_dir, config.templates_tmpfs_dir),
             memory_directory(config.state_dir, config.templates_tmpfs_dir))
    for directory in tmpfs:
        try:
            private_directory(directory)
        except NotPrivate as error:
            raise StartupError(
                f"templates_tmpfs_dir: {error}; another user may have made it first, to read or replace guest "
                "memory: look at it and remove it, or set templates_tmpfs_dir to a directory only root may write in"
            ) from None
    for directory in (config.state_dir, *tmpfs):
        try:
            changed = tighten(directory)
        except OSError as error:
            raise StartupError(f"cannot tighten the modes under {directory}: {error}") from None
        if changed:
            log.info("{count} mode(s) under {directory} tightened: no group or other access",
                     count=changed, directory=directory)


def _tokens(config: Config) -> Tokens | None:
    """
    The API's tokens with auth on (``None`` with it off): read from
    ``api.auth.token_file``, or from ``<state_dir>/auth/token``, which is made
    with one new token when missing.

    :raise StartupError: the token file cannot be used.
    """
    if not config.api.auth.enabled:
        return None
    path = config.api.auth.token_file
    if path is None:
        path = token_path(config.state_dir)
        create_token_file(path)
    tokens = Tokens(path)
    try:
        tokens.load()
    except TokenFileError as error:
        raise StartupError(f"api.auth: {error}") from None
    return tokens


def _audit_log(config: Config) -> AuditLog | None:
    """
    The audit log (``None`` when ``audit.enabled`` is off), in a directory
    of the daemon's alone.

    :raise StartupError: it cannot be opened there.
    """
    if not config.audit.enabled:
        return None
    path = config.audit.path or os.path.join(config.state_dir, "audit", "audit.log")
    try:
        private_directory(os.path.dirname(path))
        return AuditLog(path, config.audit.max_size, config.audit.keep)
    except (NotPrivate, OSError) as error:
        raise StartupError(f"audit: {error}") from None


def make_service(config: Config, reactor: IDaemonReactor) -> MultiService:
    """
    Build the daemon's service tree from ``config``.

    :param reactor: the reactor everything runs on (process, time, TCP, UNIX).
    :raise StartupError: an image named by the configuration is missing, or
        a network range is claimed by another daemon.
    """
    def images(name: str) -> Image:
        return resolve_image(config.image_dir, name)

    for name in sorted({config.image, *(g.image for g in config.host_groups)}):
        try:
            images(name)
        except ImageNotFound as error:
            raise StartupError(str(error)) from None

    try:
        private_directory(config.state_dir, repair=True)
    except NotPrivate as error:
        raise StartupError(f"state_dir: {error}") from None
    store = NodeStore(config.state_dir)
    try:
        store.lock()
    except StateDirectoryInUse as error:
        raise StartupError(str(error)) from None
    _keep_private(config)
    try:
        secrets = SecretStore(config.state_dir, reactor)
    except OSError as error:
        raise StartupError(f"secrets store: {error}") from None
    claims = _claim_ranges(config)
    metrics = Metrics()
    budget = _buffer_budget(config)
    room = RoomWatch(reactor, config.state_dir)
    parts = FleetParts(
        clock=reactor,
        config=config,
        store=store,
        driver=DriverChoice(lambda: Deferred.fromCoroutine(decide_driver(reactor, config, images(config.image)))),
        vms=QemuProcesses(reactor),
        images=images,
        disks=OverlayDisks(reactor),
        agents=lambda path: AgentClient(reactor, path, budget=budget),
        addressing=Addressing(config, HostNetwork(config, command_runner(reactor))),
        blocking=lambda call: deferToThreadPool(reactor, reactor.getThreadPool(), call),
        secrets=secrets,
        on_boot=metrics.observe_boot,
        on_restore=metrics.observe_restore,
        events=EventHub(lambda: reactor.seconds()),
        codehost_keys=_codehost(config, reactor),
        snapshots=_snapshots(reactor),
        templates=TemplateStore(
            reactor, config.state_dir, config.templates_tmpfs_dir, config.templates_tmpfs_budget,
            metrics.observe_template_build,
        ),
        adoption=IdentityAdoption(time.time_ns),
        on_clone=metrics.observe_clone,
        on_warm_fallback=metrics.observe_warm_fallback,
        admission=_admission(config, reactor),
        on_idle=metrics.observe_idle,
        room=room,
    )
    fleet = Fleet(parts)
    parts.events.listen(metrics.observe_event)

    def node_counts() -> list[tuple[str, str, int]]:
        counted = Counter((r.hostgroup, r.status.value) for r in fleet.list())
        return [(g.name, s, counted[(g.name, s)]) for g in config.host_groups for s in STATUSES]

    metrics.watch_nodes(node_counts)
    metrics.watch_admission(parts.admission.state)
    tokens = _tokens(config)
    routes = every_route(fleet, reactor, metrics, secrets, public_metrics=config.api.auth.public_metrics,
                         budget=budget, background_limit=BackgroundLimit(config.limits.background_execs_per_node))
    api = Api(reactor, routes, metrics, tokens, fleet.hold, listener=config.api, audit=_audit_log(config))
    site = StreamingSite(api.resource(), api.plan_body)
    site.displayTracebacks = False
    connections = ConnectionLimits(site, reactor, config.limits.max_connections,
                                   config.limits.max_connections_per_peer)
    metrics.watch_limits(budget, connections)

    top = MultiService()
    claimed = _Claimed(claims)
    claimed.setServiceParent(top)  # type: ignore[no-untyped-call]  # Twisted's services are not annotated
    fleet.setServiceParent(claimed)  # type: ignore[no-untyped-call]  # (as above)
    room.setServiceParent(claimed)  # type: ignore[no-untyped-call]  # (as above)
    # After the fleet: its first round sees the nodes the fleet's start registered.
    rotation = ConsoleRotation(reactor, fleet.consoles, parts.blocking, config.console_log_size)
    rotation.setServiceParent(claimed)  # type: ignore[no-untyped-call]  # (as above)
    if config.stats_interval:
        sampler = SnapshotSampler(reactor, fleet.stats.all, config.stats_interval)
        metrics.registry.register(NodeStatsCollector(lambda: sampler.latest, lambda: {r.hostname for r in fleet.list()}))
        sampler.setServiceParent(claimed)  # type: ignore[no-untyped-call]  # (as above)
    if tokens is not None:
        TokenWatch(reactor, tokens).setServiceParent(top)  # type: ignore[no-untyped-call]  # (as above)
    listener = listening_service(_endpoint(reactor, config), connections)
    listener.setServiceParent(top)
    where = config.api.unix_socket_path or f"{config.api.bind_address}:{config.api.port}"
    log.info(
        "vmservice on {where}, state in {state_dir}, auth {auth}",
        where=where, state_dir=config.state_dir, auth=f"on ({tokens.path})" if tokens else "off",
    )
    return top
