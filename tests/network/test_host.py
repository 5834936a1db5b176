# -*- test-case-name: tests.network.test_host -*-
"""
Tests for :class:`vmservice.network.host.HostNetwork` with a recording
``run``: the commands of attach and detach in order, the nftables input,
all-or-nothing setup, bridges made on demand and removed on close when
empty, and the removal of what a crash left behind; and
:func:`vmservice.network.host.command_runner` on a recording reactor.
"""

from __future__ import annotations

import json
import os
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Any, Coroutine

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.processes import ProcessReactor
from vmservice.config import Config, HostGroupConfig, NetworkConfig
from vmservice.hypervisors.base import NetSpec
from vmservice.network import plans
from vmservice.network.host import HostNetwork, NetworkError, command_runner
from vmservice.network.ipam import Lease

MiB = 1024 * 1024

ISOLATED = HostGroupConfig(
    name="iso", vcpu=1, ram_bytes=256 * MiB,
    network=NetworkConfig(mode="isolated", range=IPv4Network("10.77.0.0/22"), drop=(IPv4Network("10.1.0.0/16"),)),
)
OPEN = HostGroupConfig(
    name="open", vcpu=1, ram_bytes=256 * MiB,
    network=NetworkConfig(mode="isolated", range=IPv4Network("10.78.0.0/24"), allow=(IPv4Network("0.0.0.0/0"),)),
)
BRIDGED = HostGroupConfig(
    name="lan", vcpu=1, ram_bytes=256 * MiB,
    network=NetworkConfig(mode="bridge", bridge="br-vm", gateway=IPv4Interface("192.168.137.1/24"),
                          range=IPv4Network("192.168.137.128/25")),
)
PLAIN = HostGroupConfig(name="plain", vcpu=1, ram_bytes=256 * MiB)

LEASE = Lease(IPv4Interface("10.77.0.6/30"), IPv4Address("10.77.0.5"))
NS = "vms-0a4d0006"
VETH = "vmh0a4d0006"
BRIDGE_LEASE = Lease(IPv4Interface("192.168.137.130/24"), IPv4Address("192.168.137.1"))
TAP = "vmtc0a88982"

#: What ``ip -4 -j addr show`` prints on the fake host.
HOST_ADDRESSES = json.dumps([
    {"ifindex": 1, "ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifindex": 2, "ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.168.1.20", "prefixlen": 24}]},
    {"ifindex": 3, "ifname": "docker0", "addr_info": [{"family": "inet", "local": "172.17.0.1", "prefixlen": 16}]},
    {"ifindex": 4, "ifname": "dummy0", "addr_info": []},
])

ADDR_SHOW = ("ip", "-4", "-j", "addr", "show")
LINK_SHOW = ("ip", "-j", "link", "show")


class Recorder:
    """
    A ``run`` that records every command and answers from :attr:`outputs`;
    commands in :attr:`failing` raise :class:`NetworkError`.
    """

    def __init__(self) -> None:
        self.commands: list[plans.Command] = []
        self.outputs: dict[tuple[str, ...], str] = {ADDR_SHOW: HOST_ADDRESSES, LINK_SHOW: "[]"}
        self.failing: set[tuple[str, ...]] = set()

    async def run(self, command: plans.Command) -> str:
        self.commands.append(command)
        if command.argv in self.failing:
            raise NetworkError(f"{' '.join(command.argv)}: RTNETLINK answers: File exists")
        return self.outputs.get(command.argv, "")

    @property
    def argvs(self) -> list[tuple[str, ...]]:
        return [command.argv for command in self.commands]


class HostTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.recorder = Recorder()
        self.netns_dir = self.mktemp()
        os.mkdir(self.netns_dir)
        config = Config(state_dir="/var/lib/vmservice", host_groups=(ISOLATED, OPEN, BRIDGED, PLAIN))
        self.host = HostNetwork(config, self.recorder.run, self.netns_dir)

    def ok(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return self.successResultOf(Deferred.fromCoroutine(coroutine))

    def fails(self, coroutine: Coroutine[Any, Any, Any], kind: type[BaseException]) -> BaseException:
        return self.failureResultOf(Deferred.fromCoroutine(coroutine), kind).value


class IsolatedAttachTests(HostTestCase):
    def test_commands_in_order(self) -> None:
        """Attach asks for the host's addresses, then runs the isolated plan in order."""
        spec = self.ok(self.host.attach(ISOLATED, LEASE))
        protected = [IPv4Network("10.77.0.0/22"), IPv4Network("10.78.0.0/24"), IPv4Network("172.17.0.1/32"),
                     IPv4Network("192.168.1.20/32"), IPv4Network("192.168.137.128/25")]
        expected = plans.isolated_setup(LEASE, ISOLATED.network.allow, ISOLATED.network.drop, protected)
        self.assertEqual(self.recorder.commands, [plans.Command(ADDR_SHOW), *expected])
        self.assertEqual(self.recorder.argvs[1], ("ip", "netns", "add", NS))
        self.assertEqual(spec, NetSpec("tap0", "52:54:0a:4d:00:06", "10.77.0.6/30", "10.77.0.5", NS))

    def test_nft_input(self) -> None:
        """The last command feeds nft the ruleset: drop list, then the host's and the daemon's addresses, then accept."""
        self.ok(self.host.attach(ISOLATED, LEASE))
        last = self.recorder.commands[-1]
        self.assertEqual(last.argv, ("ip", "netns", "exec", NS, "nft", "-f", "-"))
        text = last.stdin.decode()
        rules = [line.strip() for line in text.splitlines() if line.strip().startswith('iifname "tap0"')]
        self.assertEqual(rules, [
            'iifname "tap0" ip daddr { 10.1.0.0/16 } drop',
            'iifname "tap0" ip daddr { 10.77.0.0/22, 10.78.0.0/24, 172.17.0.1/32, 192.168.1.20/32, '
            "192.168.137.128/25 } drop",
            'iifname "tap0" accept',
        ])
        self.assertNotIn("127.0.0.1", text)

    def test_allow_list(self) -> None:
        """With an allow list only it is accepted (the protected addresses are not listed)."""
        lease = Lease(IPv4Interface("10.78.0.2/30"), IPv4Address("10.78.0.1"))
        self.ok(self.host.attach(OPEN, lease))
        text = self.recorder.commands[-1].stdin.decode()
        rules = [line.strip() for line in text.splitlines() if line.strip().startswith('iifname "tap0"')]
        self.assertEqual(rules, ['iifname "tap0" ip daddr { 0.0.0.0/0 } accept'])

    def test_protected_duplicates(self) -> None:
        """A host address listed on two interfaces appears once; loopback addresses never."""
        self.recorder.outputs[ADDR_SHOW] = json.dumps([
            {"ifname": "eth0", "addr_info": [{"local": "192.168.1.20"}]},
            {"ifname": "eth1", "addr_info": [{"local": "192.168.1.20"}, {"local": "127.0.0.53"}]},
        ])
        self.ok(self.host.attach(ISOLATED, LEASE))
        self.assertEqual(self.recorder.commands[-1].stdin.decode().count("192.168.1.20/32"), 1)
        self.assertNotIn("127.0.0.53", self.recorder.commands[-1].stdin.decode())

    def test_failing_step_tears_down(self) -> None:
        """A step that fails stops the setup, the teardown runs, and the error is raised."""
        failing = ("ip", "-n", NS, "tuntap", "add", "dev", "tap0", "mode", "tap")
        self.recorder.failing.add(failing)
        error = self.fails(self.host.attach(ISOLATED, LEASE), NetworkError)
        self.assertIn("tuntap", str(error))
        argvs = self.recorder.argvs
        self.assertEqual(argvs[argvs.index(failing) + 1:], [("ip", "netns", "delete", NS), ("ip", "link", "delete", VETH)])
        self.assertFalse(any(argv[-3:] == ("nft", "-f", "-") for argv in argvs))

    def test_failing_nft_tears_down(self) -> None:
        """nft refusing the ruleset (the last step) undoes everything too."""
        self.recorder.failing.add(("ip", "netns", "exec", NS, "nft", "-f", "-"))
        self.fails(self.host.attach(ISOLATED, LEASE), NetworkError)
        self.assertEqual(self.recorder.argvs[-2:], [("ip", "netns", "delete", NS), ("ip", "link", "delete", VETH)])

    def test_failing_teardown_keeps_first_error(self) -> None:
        """Teardown steps that fail themselves are ignored: the setup's error is the one raised."""
        failing = ("ip", "link", "add", VETH, "type", "veth", "peer", "name", "veth0", "netns", NS)
        self.recorder.failing |= {failing, ("ip", "netns", "delete", NS), ("ip", "link", "delete", VETH)}
        error = self.fails(self.host.attach(ISOLATED, LEASE), NetworkError)
        self.assertIn("link add", str(error))
        self.assertEqual(self.recorder.argvs[-3:], [failing, ("ip", "netns", "delete", NS), ("ip", "link", "delete", VETH)])

    def test_existing_namespace_is_not_undone(self) -> None:
        """A namespace that exists already (someone else's) makes the attach fail without deleting it."""
        self.recorder.failing.add(("ip", "netns", "add", NS))
        self.fails(self.host.attach(ISOLATED, LEASE), NetworkError)
        self.assertEqual(self.recorder.argvs[-1], ("ip", "netns", "add", NS))

    def test_failing_address_query(self) -> None:
        """When the host's addresses cannot be read nothing is made."""
        self.recorder.failing.add(ADDR_SHOW)
        self.fails(self.host.attach(ISOLATED, LEASE), NetworkError)
        self.assertEqual(self.recorder.argvs, [ADDR_SHOW])


class DetachTests(HostTestCase):
    def test_isolated(self) -> None:
        """Detach deletes the namespace and the host end of the veth."""
        self.ok(self.host.detach(ISOLATED.network, LEASE.ip))
        self.assertEqual(self.recorder.argvs, [("ip", "netns", "delete", NS), ("ip", "link", "delete", VETH)])

    def test_already_gone(self) -> None:
        """What is already gone is fine: every step is tried, no error."""
        self.recorder.failing |= {("ip", "netns", "delete", NS), ("ip", "link", "delete", VETH)}
        self.ok(self.host.detach(ISOLATED.network, LEASE.ip))
        self.assertEqual(len(self.recorder.commands), 2)

    def test_bridge(self) -> None:
        """A bridged VM's tap is deleted (the bridge stays)."""
        self.ok(self.host.detach(BRIDGED.network, BRIDGE_LEASE.ip))
        self.assertEqual(self.recorder.argvs, [("ip", "link", "delete", TAP)])

    def test_no_network(self) -> None:
        """Detaching a VM of a group without a network runs nothing."""
        self.ok(self.host.detach(None, LEASE.ip))
        self.assertEqual(self.recorder.commands, [])


class BridgeTests(HostTestCase):
    show = ("ip", "link", "show", "br-vm")
    ports = ("ip", "-j", "link", "show", "master", "br-vm")

    def test_existing_bridge(self) -> None:
        """A bridge that exists is used as it is: only the tap is made."""
        spec = self.ok(self.host.attach(BRIDGED, BRIDGE_LEASE))
        self.assertEqual(self.recorder.commands, [plans.Command(self.show), *plans.bridge_setup(BRIDGE_LEASE, "br-vm")])
        self.assertEqual(spec, NetSpec(TAP, "52:54:c0:a8:89:82", "192.168.137.130/24", "192.168.137.1", None))
        self.ok(self.host.close())
        self.assertEqual(len(self.recorder.commands), 4, "close leaves a bridge it did not make alone")

    def test_take_tap(self) -> None:
        """A spare VM's tap takes the place of the node's own."""
        self.ok(self.host.take_tap(BRIDGED, BRIDGE_LEASE, "vmp0a1b2c"))
        self.assertEqual(self.recorder.commands, plans.bridge_takeover(BRIDGE_LEASE, "br-vm", "vmp0a1b2c"))

    def test_take_tap_needs_a_bridge(self) -> None:
        self.fails(self.host.take_tap(ISOLATED, BRIDGE_LEASE, "vmp0a1b2c"), NetworkError)
        self.assertEqual(self.recorder.commands, [])

    def test_missing_bridge_created(self) -> None:
        """When `ip link show BR` fails the bridge is made with the gateway address before the tap."""
        self.recorder.failing.add(self.show)
        self.ok(self.host.attach(BRIDGED, BRIDGE_LEASE))
        self.assertEqual(self.recorder.commands, [
            plans.Command(self.show),
            *plans.bridge_create("br-vm", "192.168.137.1/24"),
            *plans.bridge_setup(BRIDGE_LEASE, "br-vm"),
        ])

    def test_close_deletes_empty_bridge(self) -> None:
        """close() deletes a bridge this run made once no port is left on it."""
        self.recorder.failing.add(self.show)
        self.ok(self.host.attach(BRIDGED, BRIDGE_LEASE))
        self.ok(self.host.detach(BRIDGED.network, BRIDGE_LEASE.ip))
        del self.recorder.commands[:]
        self.recorder.outputs[self.ports] = "[]"
        self.ok(self.host.close())
        self.assertEqual(self.recorder.argvs, [self.ports, ("ip", "link", "delete", "br-vm")])
        del self.recorder.commands[:]
        self.ok(self.host.close())
        self.assertEqual(self.recorder.commands, [], "a second close has nothing left to do")

    def test_close_keeps_bridge_with_ports(self) -> None:
        """A bridge that still has ports (a VM, or something of the operator's) stays."""
        self.recorder.failing.add(self.show)
        self.ok(self.host.attach(BRIDGED, BRIDGE_LEASE))
        del self.recorder.commands[:]
        self.recorder.outputs[self.ports] = json.dumps([{"ifindex": 9, "ifname": TAP, "master": "br-vm"}])
        self.ok(self.host.close())
        self.assertEqual(self.recorder.argvs, [self.ports])

    def test_close_when_ports_unknown(self) -> None:
        """When the ports cannot be listed the bridge is left alone."""
        self.recorder.failing |= {self.show, self.ports}
        self.ok(self.host.attach(BRIDGED, BRIDGE_LEASE))
        del self.recorder.commands[:]
        self.ok(self.host.close())
        self.assertEqual(self.recorder.argvs, [self.ports])

    def test_bridge_creation_fails(self) -> None:
        """A bridge that cannot be made is removed again, no tap is made, close has nothing to delete."""
        self.recorder.failing |= {self.show, ("ip", "addr", "add", "192.168.137.1/24", "dev", "br-vm")}
        self.fails(self.host.attach(BRIDGED, BRIDGE_LEASE), NetworkError)
        self.assertEqual(self.recorder.argvs[-1], ("ip", "link", "delete", "br-vm"))
        self.assertNotIn(("ip", "tuntap", "add", "dev", TAP, "mode", "tap"), self.recorder.argvs)
        del self.recorder.commands[:]
        self.ok(self.host.close())
        self.assertEqual(self.recorder.commands, [])

    def test_tap_fails(self) -> None:
        """A tap that cannot join the bridge is deleted and the error raised."""
        self.recorder.failing.add(("ip", "link", "set", TAP, "master", "br-vm"))
        self.fails(self.host.attach(BRIDGED, BRIDGE_LEASE), NetworkError)
        self.assertEqual(self.recorder.argvs[-1], ("ip", "link", "delete", TAP))


class CleanOrphansTests(HostTestCase):
    def entries(self, *names: str) -> None:
        for name in names:
            open(os.path.join(self.netns_dir, name), "w").close()

    def links(self, *names: str) -> None:
        self.recorder.outputs[LINK_SHOW] = json.dumps(
            [{"ifindex": index, "ifname": name, "flags": ["UP"]} for index, name in enumerate(names, 1)]
        )

    def test_removes_only_unkept_names_of_our_ranges(self) -> None:
        """Names of our ranges not kept are removed; kept, foreign and other daemons' names stay."""
        self.entries(
            "vms-0a4d0006",  # 10.77.0.6: kept
            "vms-0a4d000a",  # 10.77.0.10: orphan
            "vms-0a000006",  # 10.0.0.6: not in our ranges (another daemon's)
            "vms-zzzzzzzz",
            "other",
        )
        self.links(
            "lo", "eth0", "br-vm",
            "vmh0a4d0006",   # kept
            "vmh0a4d000a",   # orphan
            "vmtc0a88982",   # 192.168.137.130: orphan of the bridge group
            "vmtc0a88902",   # 192.168.137.2: in the gateway's network but not the range
            "vmh0a000006",   # 10.0.0.6: not ours
            "vmh0a4e0002",   # 10.78.0.2: orphan of the second isolated group
        )
        found = self.ok(self.host.clean_orphans(lambda: [IPv4Address("10.77.0.6")]))
        self.assertEqual(found, ["vms-0a4d000a", "vmh0a4d000a", "vmtc0a88982", "vmh0a4e0002"])
        self.assertEqual(self.recorder.argvs, [
            LINK_SHOW,
            ("ip", "netns", "pids", "vms-0a4d000a"),
            ("ip", "netns", "delete", "vms-0a4d000a"),
            ("ip", "netns", "pids", "vms-0a4d000a"),
            ("ip", "link", "delete", "vmh0a4d000a"),
            ("ip", "link", "delete", "vmtc0a88982"),
            ("ip", "link", "delete", "vmh0a4e0002"),
        ])

    def test_keep_everything(self) -> None:
        """With every address kept nothing is removed."""
        self.entries("vms-0a4d0006", "vms-0a4d000a")
        self.links("vmh0a4d0006", "vmh0a4d000a", "vmtc0a88982")
        keep = [IPv4Address(ip) for ip in ("10.77.0.6", "10.77.0.10", "192.168.137.130")]
        self.assertEqual(self.ok(self.host.clean_orphans(lambda: keep)), [])
        self.assertEqual(self.recorder.argvs, [LINK_SHOW])

    def test_no_netns_dir(self) -> None:
        """Without a netns directory (no namespace ever made) only links are looked at."""
        os.rmdir(self.netns_dir)
        self.links("vmh0a4d000a")
        self.assertEqual(self.ok(self.host.clean_orphans(lambda: [])), ["vmh0a4d000a"])

    def test_removal_failures_ignored(self) -> None:
        """A removal that fails (already gone) does not stop the others."""
        self.entries("vms-0a4d000a", "vms-0a4d000e")
        self.recorder.failing.add(("ip", "netns", "delete", "vms-0a4d000a"))
        self.assertEqual(self.ok(self.host.clean_orphans(lambda: [])), ["vms-0a4d000a", "vms-0a4d000e"])
        self.assertEqual(self.recorder.argvs[-1], ("ip", "netns", "delete", "vms-0a4d000e"))

    def test_empty_link_output(self) -> None:
        """An empty answer from ip is no links."""
        self.recorder.outputs[LINK_SHOW] = ""
        self.assertEqual(self.ok(self.host.clean_orphans(lambda: [])), [])


class CommandRunnerTests(SynchronousTestCase):
    """
    :func:`command_runner` on a reactor that records its children instead of
    starting them.
    """

    def setUp(self) -> None:
        self.reactor = ProcessReactor()
        self.run = command_runner(self.reactor)

    def test_runs_argv_with_stdin(self) -> None:
        """
        A command runs as a child with its argv, a plain environment (PATH, LC_ALL=C) and its
        standard input written then closed; its output is the result.
        """
        d = Deferred.fromCoroutine(self.run(plans.Command(("nft", "-f", "-"), b"table inet x {}\n")))
        protocol, argv, _ = self.reactor.spawned[0]
        self.assertEqual(argv, ["nft", "-f", "-"])
        self.assertEqual(set(self.reactor.environments[0] or {}), {"PATH", "LC_ALL"})
        self.assertEqual((self.reactor.environments[0] or {})["LC_ALL"], "C")
        transport = self.reactor.transports[0]
        self.assertEqual((transport.stdin, transport.stdin_closed), (b"table inet x {}\n", True))
        self.assertNoResult(d)
        transport.end(0, out=b'[{"ifname": "lo"}]\n')
        self.assertEqual(self.successResultOf(d), '[{"ifname": "lo"}]\n')

    def test_no_stdin(self) -> None:
        """A command without standard input gets none, and its standard input is left alone."""
        d = Deferred.fromCoroutine(self.run(plans.Command(("ip", "link", "show"))))
        transport = self.reactor.transports[0]
        self.assertEqual((transport.stdin, transport.stdin_closed), (b"", False))
        transport.end(0)
        self.assertEqual(self.successResultOf(d), "")

    def test_failure_names_command_and_last_error_line(self) -> None:
        """A non-zero exit fails with NetworkError naming the command and the last line of its error output."""
        d = Deferred.fromCoroutine(self.run(plans.Command(("ip", "netns", "add", NS))))
        self.reactor.transports[0].end(1, err=b"first\nCannot create namespace file: File exists\n")
        error = self.failureResultOf(d, NetworkError).value
        self.assertEqual(str(error), f"ip netns add {NS}: Cannot create namespace file: File exists")

    def test_failure_without_error_output(self) -> None:
        """A non-zero exit with nothing on standard error says the exit status."""
        d = Deferred.fromCoroutine(self.run(plans.Command(("ip", "link", "delete", VETH))))
        self.reactor.transports[0].end(2)
        self.assertEqual(str(self.failureResultOf(d, NetworkError).value), f"ip link delete {VETH}: exit status 2")
