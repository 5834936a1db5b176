# -*- test-case-name: tests.network.test_plans -*-
"""
Tests for :mod:`vmservice.network.plans`: names derived from VM addresses
(and back), MAC addresses, the nftables ruleset of an isolated VM's
namespace (rule order for each combination of allow/drop), and the command
lists of isolated and bridge setup and teardown.  That nft itself accepts the
ruleset is checked in :mod:`tests.integration.network.test_plans`.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.network.plan_ranges import ALLOW, DROP, PROTECTED
from vmservice.network.ipam import Lease
from vmservice.network.plans import (
    NFT_TABLE,
    NS_TAP,
    NS_VETH,
    Command,
    address_of,
    bridge_create,
    bridge_setup,
    bridge_takeover,
    bridge_teardown,
    isolated_setup,
    isolated_teardown,
    mac_address,
    netns_name,
    ruleset,
    suffix,
    tap_name,
    veth_name,
)

ipv4 = st.integers(0, 2**32 - 1).map(IPv4Address)

IP = IPv4Address("10.77.0.6")
LEASE = Lease(IPv4Interface("10.77.0.6/30"), IPv4Address("10.77.0.5"))
NS = "vms-0a4d0006"
VETH = "vmh0a4d0006"


def forward_rules(text: str) -> list[str]:
    """The rules of the ruleset's forward chain, in order, without the chain's type line."""
    lines = [line.strip() for line in text.splitlines()]
    start = lines.index("chain forward {")
    end = lines.index("}", start)
    return [line for line in lines[start + 1 : end] if not line.startswith("type ")]


def input_rules(text: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines()]
    start = lines.index("chain input {")
    end = lines.index("}", start)
    return lines[start + 1 : end]


class NameTests(SynchronousTestCase):
    def test_names(self) -> None:
        """The address in 8 hex digits after a prefix per kind of object."""
        self.assertEqual(suffix(IP), "0a4d0006")
        self.assertEqual((netns_name(IP), veth_name(IP), tap_name(IP)), (NS, VETH, "vmt0a4d0006"))

    @given(ipv4)
    def test_address_of_inverts(self, ip: IPv4Address) -> None:
        """address_of gives back the address any of our names was made from."""
        for name in (netns_name(ip), veth_name(ip), tap_name(ip)):
            self.assertEqual(address_of(name), ip, name)

    @given(ipv4)
    def test_names_fit_linux(self, ip: IPv4Address) -> None:
        """Every name fits Linux's 15-character interface name limit, whatever the address."""
        for name in (netns_name(ip), veth_name(ip), tap_name(ip), NS_TAP, NS_VETH):
            self.assertLessEqual(len(name), 15, name)
            self.assertRegex(name, r"\A[a-z0-9-]+\Z")

    @given(ipv4, ipv4)
    def test_names_unique(self, a: IPv4Address, b: IPv4Address) -> None:
        """Two addresses never share a name (or a MAC address)."""
        if a != b:
            self.assertNotEqual(netns_name(a), netns_name(b))
            self.assertNotEqual(veth_name(a), veth_name(b))
            self.assertNotEqual(tap_name(a), tap_name(b))
            self.assertNotEqual(mac_address(a), mac_address(b))

    def test_address_of_foreign(self) -> None:
        """Names that are not ours give None."""
        for name in ("eth0", "lo", "br0", "vms-", "vms-0a4d000", "vms-0a4d00061", "vmhzzzzzzzz", "tap0",
                     "veth0", "vmx0a4d0006", "docker0", "vms-0a4d000g"):
            self.assertIsNone(address_of(name), name)

    def test_address_of_only_canonical(self) -> None:
        """Only the names suffix() writes (8 lowercase hex digits) are ours: int()'s extras are not."""
        for name in ("vmh0x0a4d00", "vms-0a4d_006", "vmt+0a4d006", "vmh 0a4d006", "vms-0A4D0006"):
            self.assertIsNone(address_of(name), name)


    def test_mac(self) -> None:
        """A locally administered unicast MAC with the address in its last four bytes."""
        self.assertEqual(mac_address(IP), "52:54:0a:4d:00:06")
        first = int(mac_address(IP).split(":")[0], 16)
        self.assertTrue(first & 0x02)
        self.assertFalse(first & 0x01)


class RulesetTests(SynchronousTestCase):
    def test_only_drop(self) -> None:
        """drop alone: the drop list, then the protected addresses, then everything else accepted."""
        rules = forward_rules(ruleset([], DROP, PROTECTED))
        self.assertEqual(rules, [
            "ct state established,related accept",
            'iifname "tap0" ip daddr { 10.1.0.0/16 } drop',
            'iifname "tap0" ip daddr { 10.77.0.0/22, 192.168.1.20/32 } drop',
            'iifname "tap0" accept',
        ])

    def test_only_allow(self) -> None:
        """allow alone: the allow list accepted and nothing else (the chain's policy drops)."""
        text = ruleset(ALLOW, [], PROTECTED)
        self.assertEqual(forward_rules(text), [
            "ct state established,related accept",
            'iifname "tap0" ip daddr { 10.0.0.0/8, 192.0.2.0/24 } accept',
        ])
        self.assertIn("type filter hook forward priority 0; policy drop;", text)
        self.assertNotIn("10.77.0.0/22", text)

    def test_both(self) -> None:
        """drop and allow: drop first, carving holes out of allow."""
        self.assertEqual(forward_rules(ruleset(ALLOW, DROP, PROTECTED)), [
            "ct state established,related accept",
            'iifname "tap0" ip daddr { 10.1.0.0/16 } drop',
            'iifname "tap0" ip daddr { 10.0.0.0/8, 192.0.2.0/24 } accept',
        ])

    def test_neither(self) -> None:
        """Neither list: the protected addresses dropped, then everything else accepted."""
        self.assertEqual(forward_rules(ruleset([], [], PROTECTED)), [
            "ct state established,related accept",
            'iifname "tap0" ip daddr { 10.77.0.0/22, 192.168.1.20/32 } drop',
            'iifname "tap0" accept',
        ])

    def test_neither_nothing_protected(self) -> None:
        """With nothing to protect there is no empty set, just the accept."""
        self.assertEqual(forward_rules(ruleset([], [], [])), [
            "ct state established,related accept",
            'iifname "tap0" accept',
        ])

    def test_table_and_input(self) -> None:
        """One inet table; nothing new reaches the namespace itself, and nothing comes in to the VM."""
        text = ruleset(ALLOW, DROP, PROTECTED)
        self.assertTrue(text.startswith(f"table inet {NFT_TABLE} {{\n"))
        self.assertEqual(input_rules(text), [
            "type filter hook input priority 0; policy drop;",
            "ct state established,related accept",
        ])
        for rule in forward_rules(text)[1:]:
            self.assertTrue(rule.startswith('iifname "tap0" '), rule)
        self.assertEqual(text.count("{"), text.count("}"))


class IsolatedPlanTests(SynchronousTestCase):
    def test_setup(self) -> None:
        """The namespace, the veth into it, the host route, the tap with the gateway address, forwarding, nftables."""
        steps = isolated_setup(LEASE, ALLOW, DROP, PROTECTED)
        self.assertEqual([step.argv for step in steps[:-1]], [
            ("ip", "netns", "add", NS),
            ("ip", "link", "add", VETH, "type", "veth", "peer", "name", "veth0", "netns", NS),
            ("ip", "link", "set", VETH, "up"),
            ("sh", "-c", f"echo 1 > /proc/sys/net/ipv4/conf/{VETH}/proxy_arp"),
            ("ip", "route", "replace", "10.77.0.4/30", "dev", VETH),
            ("ip", "-n", NS, "link", "set", "lo", "up"),
            ("ip", "-n", NS, "link", "set", "veth0", "up"),
            ("ip", "-n", NS, "tuntap", "add", "dev", "tap0", "mode", "tap"),
            ("ip", "-n", NS, "link", "set", "tap0", "address", "52:55:0a:4d:00:06"),
            ("ip", "-n", NS, "addr", "add", "10.77.0.5/30", "dev", "tap0"),
            ("ip", "-n", NS, "link", "set", "tap0", "up"),
            ("ip", "-n", NS, "route", "add", "default", "dev", "veth0"),
            ("ip", "netns", "exec", NS, "sh", "-c",
             "echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > /proc/sys/net/ipv4/conf/veth0/proxy_arp"),
        ])
        self.assertTrue(all(step.stdin is None for step in steps[:-1]))
        self.assertEqual(steps[-1], Command(("ip", "netns", "exec", NS, "nft", "-f", "-"),
                                            ruleset(ALLOW, DROP, PROTECTED).encode()))

    def test_namespace_first_nft_last(self) -> None:
        """Every step after the first works in or on the namespace made first; the firewall is last."""
        steps = isolated_setup(LEASE, [], [], PROTECTED)
        self.assertEqual(steps[0].argv, ("ip", "netns", "add", NS))
        self.assertEqual(steps[-1].argv[-3:], ("nft", "-f", "-"))
        self.assertIn(b'ip daddr { 10.77.0.0/22, 192.168.1.20/32 } drop', steps[-1].stdin)

    def test_teardown(self) -> None:
        """Deleting the namespace takes its tap, veth end and table; the host end of the veth goes too."""
        self.assertEqual(isolated_teardown(IP), [
            Command(("ip", "netns", "delete", NS)),
            Command(("ip", "link", "delete", VETH)),
        ])


class BridgePlanTests(SynchronousTestCase):
    def test_setup(self) -> None:
        """A bridged VM gets a tap named after its address, put on the bridge, then up."""
        lease = Lease(IPv4Interface("192.168.137.10/24"), IPv4Address("192.168.137.1"))
        self.assertEqual([step.argv for step in bridge_setup(lease, "br0")], [
            ("ip", "tuntap", "add", "dev", "vmtc0a8890a", "mode", "tap"),
            ("ip", "link", "set", "vmtc0a8890a", "master", "br0"),
            ("ip", "link", "set", "vmtc0a8890a", "up"),
        ])

    def test_takeover(self) -> None:
        """A spare VM's tap replaces the node's: that one deleted, the spare's renamed while down, bridged, up."""
        lease = Lease(IPv4Interface("192.168.137.10/24"), IPv4Address("192.168.137.1"))
        self.assertEqual([step.argv for step in bridge_takeover(lease, "br0", "vmp0a1b2c")], [
            ("ip", "link", "delete", "vmtc0a8890a"),
            ("ip", "link", "set", "dev", "vmp0a1b2c", "down"),
            ("ip", "link", "set", "dev", "vmp0a1b2c", "name", "vmtc0a8890a"),
            ("ip", "link", "set", "vmtc0a8890a", "master", "br0"),
            ("ip", "link", "set", "vmtc0a8890a", "up"),
        ])

    def test_teardown(self) -> None:
        """Deleting the tap is all a bridged VM's teardown does."""
        self.assertEqual(bridge_teardown(IPv4Address("192.168.137.10")), [Command(("ip", "link", "delete", "vmtc0a8890a"))])

    def test_create(self) -> None:
        """A bridge is made, given the gateway address, then brought up."""
        self.assertEqual([step.argv for step in bridge_create("br0", "192.168.137.1/24")], [
            ("ip", "link", "add", "br0", "type", "bridge"),
            ("ip", "addr", "add", "192.168.137.1/24", "dev", "br0"),
            ("ip", "link", "set", "br0", "up"),
        ])
