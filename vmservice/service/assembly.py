# -*- test-case-name: tests.service.test_assembly -*-
"""
Assembling the daemon: :func:`make_service`, in named steps (what the host
gives, the fleet's parts, the API site, the service tree).

The service holds the fleet (which stops every VM when the daemon stops),
the API listener (which stops first, so no request arrives while VMs go)
with ``e2b:``, the E2B sandboxes and their listener (:mod:`.e2b_port`),
and, when the daemon is a node of a Kubernetes cluster, the node's
controller (:mod:`.cluster_node`) and its kubelet port (:mod:`.kubelet_port`).
"""

from __future__ import annotations

import ipaddress
import time
from collections import Counter
from typing import Any, Callable, Mapping

from treq.client import HTTPClient
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint, UNIXServerEndpoint
from twisted.internet.interfaces import IStreamServerEndpoint
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.web.client import Agent

from .agents import agent_client
from ..agent.metrics import MetricsClient
from ..api.app import Api
from ..api.connection_limits import ConnectionLimits
from ..api.resources import every_route
from ..api.streaming import StreamingSite
from ..auth import Tokens, TokenWatch
from ..buffer_budget import BufferBudget
from ..codehost import CodeHost
from ..config import Config
from ..hypervisors.qemu import QemuProcesses
from ..images.store import Image
from ..listening import listening_service
from ..metrics import STATUSES, Metrics
from ..network.claims import RangeClaims
from ..network.host import HostNetwork, command_runner
from ..nodes.addressing import Addressing
from ..nodes.admission import Admission
from ..nodes.background_limit import BackgroundLimit
from ..nodes.console_rotation import ConsoleRotation
from ..nodes.events import EventHub
from ..nodes.fleet import Fleet
from ..nodes.blocking import Blocking
from ..nodes.catalog import Catalog
from ..nodes.driver_choice import DriverChoice
from ..nodes.room import RoomWatch
from ..nodes.runtime_parts import RuntimeParts
from ..nodes.store import NodeStore
from ..nodes.warm.adoption import IdentityAdoption
from ..nodes.warm.starts import WarmStarts
from ..nodes.warm.templates import TemplateStore
from ..nodestats_metrics import NodeStatsCollector, SnapshotSampler
from ..secretstore import SecretStore
from ..storage.overlay import OverlayDisks
from .host import (
    claim_ranges, find_images, load_tokens, make_admission, open_audit_log, open_secret_store, size_buffer_budget,
    take_state_dir,
)
from .cluster_node import cluster_node
from .kubelet_port import kubelet_listener
from .e2b_port import e2b_port
from .driver import decide_driver
from .reactor import IDaemonReactor

#: Logged under the package's name, as when it was one module.
log = Logger(namespace="vmservice.service")


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


def _node_parts(
    config: Config, reactor: IDaemonReactor, store: NodeStore, images: Callable[[str], Image], secrets: SecretStore,
    metrics: Metrics, budget: BufferBudget, room: RoomWatch,
) -> RuntimeParts:
    """What the nodes are made with: the driver, agents, network, disks, events, secrets, room, metrics."""
    return RuntimeParts(
        clock=reactor,
        config=config,
        store=store,
        driver=DriverChoice(lambda: Deferred.fromCoroutine(decide_driver(reactor, config, images(config.image)))),
        agents=lambda path, transport: agent_client(reactor, path, transport, budget),
        addressing=Addressing(config, HostNetwork(config, command_runner(reactor))),
        disks=OverlayDisks(reactor),
        events=EventHub(lambda: reactor.seconds()),
        secrets=secrets,
        room=room,
        metrics=metrics,
    )


def _fleet(
    config: Config, reactor: IDaemonReactor, parts: RuntimeParts, images: Callable[[str], Image], metrics: Metrics,
    admission: Admission, blocking: Blocking,
) -> Fleet:
    """
    The fleet of ``parts``, and warm start wired into it: the templates warm
    groups' nodes are cloned from, and the identities clones and forks adopt.
    """
    catalog = Catalog(config, images)
    templates = TemplateStore(reactor, config.state_dir, config.templates_tmpfs_dir, config.templates_tmpfs_budget,
                              metrics.observe_template_build)
    warm = WarmStarts(parts, catalog, admission, blocking, templates, IdentityAdoption(time.time_ns))
    return Fleet(parts, catalog, warm, admission=admission, vms=QemuProcesses(reactor), blocking=blocking,
                 snapshots=_snapshots(reactor), codehost_keys=_codehost(config, reactor))


def _watch_fleet(config: Config, fleet: Fleet, admission: Admission, metrics: Metrics) -> None:
    """The fleet's events, node counts (by group and status) and admission, reported in ``metrics``."""
    fleet.events.listen(metrics.observe_event)

    def node_counts() -> list[tuple[str, str, int]]:
        counted = Counter((r.hostgroup, r.status.value) for r in fleet.list())
        return [(g.name, s, counted[(g.name, s)]) for g in config.host_groups for s in STATUSES]

    metrics.watch_nodes(node_counts)
    metrics.watch_admission(admission.state)


def _api_site(
    config: Config, reactor: IDaemonReactor, fleet: Fleet, metrics: Metrics, secrets: SecretStore,
    budget: BufferBudget, tokens: Tokens | None,
) -> ConnectionLimits:
    """
    The API: its routes, the site that serves them, and the connection limits
    around it (what the listener serves).

    :raise StartupError: the audit log cannot be opened.
    """
    routes = every_route(fleet, reactor, metrics, secrets, public_metrics=config.api.auth.public_metrics,
                         budget=budget, background_limit=BackgroundLimit(config.limits.background_execs_per_node))
    api = Api(reactor, routes, metrics, tokens, fleet.hold, listener=config.api, audit=open_audit_log(config))
    site = StreamingSite(api.resource(), api.plan_body)
    site.displayTracebacks = False
    connections = ConnectionLimits(site, reactor, config.limits.max_connections,
                                   config.limits.max_connections_per_peer)
    metrics.watch_limits(budget, connections)
    return connections


def _service_tree(
    config: Config, reactor: IDaemonReactor, claims: RangeClaims, fleet: Fleet, blocking: Blocking,
    room: RoomWatch, metrics: Metrics, tokens: Tokens | None, connections: ConnectionLimits,
) -> MultiService:
    """
    The daemon's services: the range claims held around the fleet, its room
    watch, console rotation and statistics sampler; the token watch; the API
    listener.
    """
    top = MultiService()
    claimed = _Claimed(claims)
    claimed.setServiceParent(top)  # type: ignore[no-untyped-call]  # Twisted's services are not annotated
    fleet.setServiceParent(claimed)  # type: ignore[no-untyped-call]  # (as above)
    room.setServiceParent(claimed)  # type: ignore[no-untyped-call]  # (as above)
    # After the fleet: its first round sees the nodes the fleet's start registered.
    rotation = ConsoleRotation(reactor, fleet.consoles.paths, blocking, config.console_log_size)
    rotation.setServiceParent(claimed)  # type: ignore[no-untyped-call]  # (as above)
    if config.stats_interval:
        sampler = SnapshotSampler(reactor, fleet.stats.all, config.stats_interval)
        metrics.registry.register(NodeStatsCollector(lambda: sampler.latest, lambda: {r.hostname for r in fleet.list()}))
        sampler.setServiceParent(claimed)  # type: ignore[no-untyped-call]  # (as above)
    if tokens is not None:
        TokenWatch(reactor, tokens).setServiceParent(top)  # type: ignore[no-untyped-call]  # (as above)
    listener = listening_service(_endpoint(reactor, config), connections)
    listener.setServiceParent(top)
    return top


def make_service(config: Config, reactor: IDaemonReactor) -> MultiService:
    """
    Build the daemon's service tree from ``config``: what it takes of the
    host (the steps of :mod:`~vmservice.service.host`), then the fleet, the
    API and the services that run them.

    :param reactor: the reactor everything runs on (process, time, TCP, UNIX).
    :raise StartupError: an image named by the configuration is missing, or
        a network range is claimed by another daemon.
    """
    images = find_images(config)
    store = take_state_dir(config)
    secrets = open_secret_store(config, reactor)
    claims = claim_ranges(config)
    metrics = Metrics()
    budget = size_buffer_budget(config)
    room = RoomWatch(reactor, config.state_dir)
    parts = _node_parts(config, reactor, store, images, secrets, metrics, budget, room)
    admission = make_admission(config, reactor)
    blocking: Blocking = lambda call: deferToThreadPool(reactor, reactor.getThreadPool(), call)
    fleet = _fleet(config, reactor, parts, images, metrics, admission, blocking)
    _watch_fleet(config, fleet, admission, metrics)
    tokens = load_tokens(config)
    connections = _api_site(config, reactor, fleet, metrics, secrets, budget, tokens)
    top = _service_tree(config, reactor, claims, fleet, blocking, room, metrics, tokens, connections)
    if config.e2b is not None:  # after the fleet, stopped before it: no sandbox request while the VMs go
        e2b_port(config, config.e2b, reactor, fleet, tokens).setServiceParent(top)
    if config.kubernetes is not None:  # added last, stopped first: no renewal once the VMs go
        node = cluster_node(config, config.kubernetes, reactor, admission, metrics, fleet, secrets)
        node.setServiceParent(top)  # type: ignore[no-untyped-call]  # Twisted's services are not annotated
        assert node.pods is not None  # made with the fleet
        kubelet_listener(config, config.kubernetes, reactor, fleet, node.pods, blocking).setServiceParent(top)  # type: ignore[no-untyped-call]
    where = config.api.unix_socket_path or f"{config.api.bind_address}:{config.api.port}"
    if config.e2b is not None:
        where += f", E2B API on {config.e2b.bind_address}:{config.e2b.port}"
    log.info(
        "vmservice on {where}, state in {state_dir}, auth {auth}",
        where=where, state_dir=config.state_dir, auth=f"on ({tokens.path})" if tokens else "off",
    )
    return top
