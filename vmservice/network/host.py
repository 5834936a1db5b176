# -*- test-case-name: tests.network.test_host -*-
"""
The host side of VM networking: runs :mod:`.plans`' commands to attach a VM
to its group's network and to detach it, makes a bridge when a group's is
missing, and removes what a crash left behind.

Every command runs through one function, ``run`` (a child process; the
reactor is passed in), so tests swap it for a recorder.
"""

from __future__ import annotations

import json
import os
from ipaddress import IPv4Address, IPv4Network
from typing import Awaitable, Callable, Iterable

from twisted.internet.defer import DeferredLock
from twisted.internet.interfaces import IReactorProcess
from twisted.internet.utils import getProcessOutputAndValue
from twisted.logger import Logger
from zope.interface import implementer

from ..config import Config, HostGroupConfig, NetworkConfig
from ..hypervisors.base import NetSpec
from . import plans
from .interfaces import INodeNetwork
from .ipam import Lease, pool

log = Logger()

#: Where iproute2 keeps named network namespaces.
NETNS_DIR = "/run/netns"


class NetworkError(Exception):
    """A network command failed; the message has its words and error output."""


Run = Callable[[plans.Command], Awaitable[str]]


def command_runner(reactor: IReactorProcess) -> Run:
    """
    A ``run`` that executes commands as children of ``reactor``; fails with :class:`NetworkError`.

    :param reactor: starts the commands.
    """

    async def run(command: plans.Command) -> str:
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LC_ALL": "C"}
        out: bytes
        err: bytes
        code: int
        out, err, code = await getProcessOutputAndValue(
            command.argv[0], command.argv[1:], env=env, reactor=reactor, stdinBytes=command.stdin
        )
        if code != 0:
            detail = err.decode("utf-8", "replace").strip().splitlines()
            raise NetworkError(f"{' '.join(command.argv)}: {detail[-1] if detail else f'exit status {code}'}")
        return out.decode("utf-8", "replace")

    return run


@implementer(INodeNetwork)
class HostNetwork:
    """
    Networks of one daemon's VMs.

    :param config: the configuration (groups and their networks).
    :param run: runs one command (see :func:`command_runner`).
    :param netns_dir: where named network namespaces are listed.
    """

    def __init__(self, config: Config, run: Run, netns_dir: str = NETNS_DIR) -> None:
        self._config = config
        self._run = run
        self._netns_dir = netns_dir
        self._pools = [pool(g.network) for g in config.host_groups if g.network is not None]
        self._bridges_made: set[str] = set()
        self._bridge_locks: dict[str, DeferredLock] = {}

    async def attach(self, group: HostGroupConfig, lease: Lease) -> NetSpec:
        """
        Build the VM's side of the group's network; on failure nothing of it
        is left and :class:`NetworkError` is raised.

        :param group: the VM's host group, which has a network.
        :param lease: the VM's address in it.
        :return: how QEMU joins the network.
        """
        network = group.network
        assert network is not None
        mac = plans.mac_address(lease.ip)
        spec_address, spec_gateway = str(lease.address), str(lease.gateway)
        if network.mode == "isolated":
            protected = await self._protected()
            steps = plans.isolated_setup(lease, network.allow, network.drop, protected)
            await self._make(steps, plans.isolated_teardown(lease.ip))
            return NetSpec(plans.NS_TAP, mac, spec_address, spec_gateway, plans.netns_name(lease.ip))
        assert network.bridge is not None
        await self._ensure_bridge(network)
        await self._make(plans.bridge_setup(lease, network.bridge), plans.bridge_teardown(lease.ip))
        return NetSpec(plans.tap_name(lease.ip), mac, spec_address, spec_gateway, None)

    async def take_tap(self, group: HostGroupConfig, lease: Lease, tap: str) -> None:
        """See :meth:`INodeNetwork.take_tap`; the node's own tap is gone once the first step ran."""
        network = group.network
        if network is None or network.mode != "bridge" or network.bridge is None:
            raise NetworkError(f"host group {group.name!r} has no bridge: a spare's tap cannot join it")
        for step in plans.bridge_takeover(lease, network.bridge, tap):
            await self._run(step)

    async def detach(self, network: NetworkConfig | None, ip: IPv4Address) -> None:
        """
        Remove what :meth:`attach` made for ``ip`` (what is already gone is fine).

        :param network: the network of the VM's group; ``None`` (no network)
            removes nothing.
        :param ip: the VM's address.
        """
        if network is None:
            return
        steps = plans.isolated_teardown(ip) if network.mode == "isolated" else plans.bridge_teardown(ip)
        await self._quietly(steps)

    async def clean_orphans(self, keep: Callable[[], Iterable[IPv4Address]]) -> list[str]:
        """
        Remove namespaces and interfaces named after an address of this
        daemon's ranges that no VM of ``keep()`` uses (left by a crash).
        ``keep`` is asked once the host's objects are listed, so a VM attached
        meanwhile is kept.  A namespace that still holds a process (a VM
        someone else runs) is left alone, and so is its veth.

        :return: the names removed.
        """
        names = sorted(os.listdir(self._netns_dir)) if os.path.isdir(self._netns_dir) else []
        links = json.loads(await self._run(plans.Command(("ip", "-j", "link", "show"))) or "[]")
        names += [link.get("ifname", "") for link in links]
        kept = set(keep())
        found = []
        for name in names:
            ip = plans.address_of(name)
            if ip is None or ip in kept or not any(ip in p for p in self._pools):
                continue
            if await self._occupied(ip):
                log.info("leaving {name}: its namespace still holds processes", name=name)
                continue
            found.append(name)
            if name.startswith(plans.NETNS_PREFIX):
                await self._quietly([plans.Command(("ip", "netns", "delete", name))])
            else:
                await self._quietly([plans.Command(("ip", "link", "delete", name))])
        return found

    async def _occupied(self, ip: IPv4Address) -> bool:
        netns = plans.netns_name(ip)
        if not os.path.exists(os.path.join(self._netns_dir, netns)):
            return False
        try:
            return bool((await self._run(plans.Command(("ip", "netns", "pids", netns)))).strip())
        except NetworkError:
            return False

    async def close(self) -> None:
        """Remove the bridges this run made, when no VM is left on them."""
        for bridge in sorted(self._bridges_made):
            try:
                ports = json.loads(await self._run(plans.Command(("ip", "-j", "link", "show", "master", bridge))) or "[]")
            except NetworkError:
                continue
            if not ports:
                await self._quietly([plans.Command(("ip", "link", "delete", bridge))])
        self._bridges_made.clear()

    async def _protected(self) -> list[IPv4Network]:
        """The host's own addresses and this daemon's ranges: out of reach of a VM without ``allow``."""
        found = list(self._pools)
        for entry in json.loads(await self._run(plans.Command(("ip", "-4", "-j", "addr", "show"))) or "[]"):
            for info in entry.get("addr_info", []):
                local = info.get("local")
                if local and not IPv4Address(local).is_loopback:
                    found.append(IPv4Network(f"{local}/32"))
        return sorted(set(found), key=lambda n: (int(n.network_address), n.prefixlen))

    async def _ensure_bridge(self, network: NetworkConfig) -> None:
        """Make the group's bridge if it is missing; one attach at a time per bridge."""
        assert network.bridge is not None and network.gateway is not None
        lock = self._bridge_locks.setdefault(network.bridge, DeferredLock())
        await lock.run(self._make_bridge, network.bridge, str(network.gateway))

    async def _make_bridge(self, bridge: str, gateway: str) -> None:
        try:
            await self._run(plans.Command(("ip", "link", "show", bridge)))
            return
        except NetworkError:
            pass
        log.info("creating bridge {bridge} ({gateway})", bridge=bridge, gateway=gateway)
        create, *configure = plans.bridge_create(bridge, gateway)
        await self._run(create)  # fails (leaving it alone) if someone else made it meanwhile
        await self._all_or_nothing(configure, [plans.Command(("ip", "link", "delete", bridge))])
        self._bridges_made.add(bridge)

    async def _make(self, steps: list[plans.Command], undo: list[plans.Command]) -> None:
        """
        Run ``steps``, whose first one creates the object the others build
        on (a namespace, a tap).  When that first one fails, the object
        belongs to someone else (or was never made): nothing is undone.
        """
        first, *rest = steps
        await self._run(first)
        await self._all_or_nothing(rest, undo)

    async def _all_or_nothing(self, steps: list[plans.Command], undo: list[plans.Command]) -> None:
        try:
            for step in steps:
                await self._run(step)
        except BaseException:
            await self._quietly(undo)
            raise

    async def _quietly(self, steps: list[plans.Command]) -> None:
        for step in steps:
            try:
                await self._run(step)
            except NetworkError:
                pass


__all__ = ["HostNetwork", "NetworkError", "command_runner"]
