# -*- test-case-name: tests.network.test_ipam -*-
"""
Tests for :mod:`vmservice.network.ipam`: isolated /30 slots and bridge hosts,
requested addresses and their refusals, exhaustion, and ``lease_of`` as the
inverse of ``allocate`` (properties with hypothesis).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface, IPv4Network

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.config import NetworkConfig
from vmservice.errors import BadRequest, Conflict
from vmservice.network.ipam import Lease, allocate, lease_of, pool, slots

ISOLATED = NetworkConfig(mode="isolated", range=IPv4Network("10.77.0.0/22"))
BRIDGE = NetworkConfig(mode="bridge", bridge="br0", gateway=IPv4Interface("192.168.137.1/24"))
BRIDGE_RANGE = NetworkConfig(
    mode="bridge", bridge="br0", gateway=IPv4Interface("192.168.137.1/24"), range=IPv4Network("192.168.137.64/28")
)


def _network(prefixes: tuple[int, int]) -> st.SearchStrategy[IPv4Network]:
    """Any IPv4 network whose prefix length lies in ``prefixes``."""
    low, high = prefixes
    return st.builds(
        lambda address, prefix: IPv4Network(f"{IPv4Address(address)}/{prefix}", strict=False),
        st.integers(0, 2**32 - 1),
        st.integers(low, high),
    )


def isolated_networks(prefixes: tuple[int, int] = (22, 30)) -> st.SearchStrategy[NetworkConfig]:
    return _network(prefixes).map(lambda range_: NetworkConfig(mode="isolated", range=range_))


@st.composite
def bridge_networks(draw: st.DrawFn, max_hosts_prefix: int = 22) -> NetworkConfig:
    """A bridge network: a gateway (/22 to /30), with or without a range (/24 to /30) inside its network."""
    gateway_net = draw(_network((max_hosts_prefix, 30)))
    host = gateway_net.network_address + draw(st.integers(1, gateway_net.num_addresses - 2))
    gateway = IPv4Interface(f"{host}/{gateway_net.prefixlen}")
    range_: IPv4Network | None = None
    if draw(st.booleans()):
        prefix = draw(st.integers(max(24, gateway_net.prefixlen), 30))
        subnets = list(gateway_net.subnets(new_prefix=prefix))
        range_ = draw(st.sampled_from(subnets))
    return NetworkConfig(mode="bridge", bridge="br0", gateway=gateway, range=range_)


def exhaust(testcase: SynchronousTestCase, network: NetworkConfig) -> list[Lease]:
    """Allocate until the network is full; the last attempt must be a Conflict no_free_address."""
    used: set[IPv4Address] = set()
    leases = []
    for _ in range(slots(network) + 1):
        try:
            lease = allocate(network, used)
        except Conflict as error:
            testcase.assertEqual(error.code, "no_free_address")
            return leases
        testcase.assertNotIn(lease.ip, used)
        used.add(lease.ip)
        leases.append(lease)
    testcase.fail(f"{network} gave more than slots() = {slots(network)} addresses")


class IsolatedTests(SynchronousTestCase):
    def test_first_slots(self) -> None:
        """VMs take the third address of each /30 in order; the gateway is the second."""
        first = allocate(ISOLATED, set())
        self.assertEqual(first, Lease(IPv4Interface("10.77.0.2/30"), IPv4Address("10.77.0.1")))
        second = allocate(ISOLATED, {first.ip})
        self.assertEqual(second, Lease(IPv4Interface("10.77.0.6/30"), IPv4Address("10.77.0.5")))
        self.assertEqual(second.ip, IPv4Address("10.77.0.6"))

    def test_lowest_free(self) -> None:
        """A freed slot below the others is the next one handed out."""
        used = {IPv4Address("10.77.0.6"), IPv4Address("10.77.0.10")}
        self.assertEqual(allocate(ISOLATED, used).ip, IPv4Address("10.77.0.2"))
        used.add(IPv4Address("10.77.0.2"))
        self.assertEqual(allocate(ISOLATED, used).ip, IPv4Address("10.77.0.14"))

    def test_slots(self) -> None:
        """A /22 holds 256 VMs, a /30 one."""
        self.assertEqual(slots(ISOLATED), 256)
        self.assertEqual(slots(NetworkConfig(mode="isolated", range=IPv4Network("10.0.0.0/30"))), 1)
        self.assertEqual(pool(ISOLATED), IPv4Network("10.77.0.0/22"))

    def test_wanted(self) -> None:
        """A requested VM address of the range is given, also with a prefix length written after it."""
        self.assertEqual(allocate(ISOLATED, set(), "10.77.3.254"), lease_of(ISOLATED, IPv4Address("10.77.3.254")))
        self.assertEqual(allocate(ISOLATED, set(), "10.77.0.6/30").ip, IPv4Address("10.77.0.6"))

    def test_wanted_not_a_vm_address(self) -> None:
        """Network, gateway and broadcast addresses of a /30, and addresses outside the range, are 400 ip_out_of_range."""
        for wanted in ("10.77.0.4", "10.77.0.5", "10.77.0.7", "10.78.0.2", "10.76.255.254", "192.168.1.2"):
            error = self.assertRaises(BadRequest, allocate, ISOLATED, set(), wanted)
            self.assertEqual((error.code, error.status), ("ip_out_of_range", 400), wanted)

    def test_wanted_invalid(self) -> None:
        """What is not an IPv4 address is 400 invalid_ip."""
        for wanted in ("nope", "10.77.0", "10.77.0.256", "::1", "10.77.0.6/33", "fe80::6"):
            error = self.assertRaises(BadRequest, allocate, ISOLATED, set(), wanted)
            self.assertEqual(error.code, "invalid_ip", wanted)

    def test_wanted_taken(self) -> None:
        """A requested address in use is 409 ip_taken."""
        error = self.assertRaises(Conflict, allocate, ISOLATED, {IPv4Address("10.77.0.6")}, "10.77.0.6")
        self.assertEqual((error.code, error.status), ("ip_taken", 409))

    def test_wanted_range_check_before_taken(self) -> None:
        """An address outside the range is refused as such, even when some record holds it."""
        error = self.assertRaises(BadRequest, allocate, ISOLATED, {IPv4Address("10.78.0.2")}, "10.78.0.2")
        self.assertEqual(error.code, "ip_out_of_range")

    def test_empty_wanted_is_automatic(self) -> None:
        """An empty requested address means: choose one."""
        self.assertEqual(allocate(ISOLATED, set(), "").ip, IPv4Address("10.77.0.2"))

    def test_full(self) -> None:
        """Once every slot is used, a new allocation is 409 no_free_address."""
        network = NetworkConfig(mode="isolated", range=IPv4Network("10.0.0.0/29"))
        used = {IPv4Address("10.0.0.2"), IPv4Address("10.0.0.6")}
        error = self.assertRaises(Conflict, allocate, network, used)
        self.assertEqual((error.code, error.status), ("no_free_address", 409))

    def test_lease_of_refuses(self) -> None:
        """lease_of refuses what is not a VM address of the range."""
        for ip in ("10.77.0.1", "10.77.0.3", "10.77.4.2"):
            self.assertRaises(BadRequest, lease_of, ISOLATED, IPv4Address(ip))

    @given(isolated_networks(), st.data())
    @settings(max_examples=200, deadline=None)
    def test_allocated_is_third_of_its_slot(self, network: NetworkConfig, data: st.DataObject) -> None:
        """Every allocated isolated address is the third of its /30, inside the range, its gateway the second."""
        candidates = [block.network_address + 2 for block in network.range.subnets(new_prefix=30)]
        used = set(data.draw(st.lists(st.sampled_from(candidates), max_size=min(len(candidates) - 1, 20))))
        lease = allocate(network, used)
        block = IPv4Network(f"{lease.ip}/30", strict=False)
        self.assertEqual(lease.ip, block.network_address + 2)
        self.assertEqual(lease.gateway, block.network_address + 1)
        self.assertEqual(lease.address.network, block)
        self.assertIn(lease.ip, network.range)
        self.assertNotIn(lease.ip, used)
        self.assertEqual(lease.ip, min(set(candidates) - used))

    @given(isolated_networks((24, 30)))
    @settings(max_examples=50, deadline=None)
    def test_isolated_exhaustion(self, network: NetworkConfig) -> None:
        """Allocating until full yields exactly slots() distinct addresses, then Conflict no_free_address."""
        leases = exhaust(self, network)
        self.assertEqual(len(leases), slots(network))
        self.assertEqual(len({lease.ip for lease in leases}), slots(network))
        self.assertEqual(slots(network), 2 ** (30 - network.range.prefixlen))

    @given(isolated_networks(), st.data())
    @settings(max_examples=200, deadline=None)
    def test_isolated_lease_of_allocate(self, network: NetworkConfig, data: st.DataObject) -> None:
        """lease_of(allocate(...).ip) is that lease, for automatic and requested addresses."""
        lease = allocate(network, set())
        self.assertEqual(lease_of(network, lease.ip), lease)
        blocks = list(network.range.subnets(new_prefix=30))
        wanted = data.draw(st.sampled_from(blocks)).network_address + 2
        requested = allocate(network, set(), str(wanted))
        self.assertEqual(requested.ip, wanted)
        self.assertEqual(lease_of(network, requested.ip), requested)


class BridgeTests(SynchronousTestCase):
    def test_hosts_skip_gateway(self) -> None:
        """Without a range every host address of the gateway's network but the gateway's is a VM address."""
        first = allocate(BRIDGE, set())
        self.assertEqual(first, Lease(IPv4Interface("192.168.137.2/24"), IPv4Address("192.168.137.1")))
        self.assertEqual(slots(BRIDGE), 253)
        self.assertEqual(pool(BRIDGE), IPv4Network("192.168.137.0/24"))

    def test_range(self) -> None:
        """With a range, addresses come from it, with the gateway network's prefix."""
        lease = allocate(BRIDGE_RANGE, set())
        self.assertEqual(lease, Lease(IPv4Interface("192.168.137.65/24"), IPv4Address("192.168.137.1")))
        self.assertEqual(slots(BRIDGE_RANGE), 14)

    def test_refused(self) -> None:
        """The gateway, network and broadcast addresses and what lies outside are not VM addresses."""
        for wanted in ("192.168.137.1", "192.168.137.0", "192.168.137.255", "192.168.138.2"):
            error = self.assertRaises(BadRequest, allocate, BRIDGE, set(), wanted)
            self.assertEqual(error.code, "ip_out_of_range", wanted)
        error = self.assertRaises(BadRequest, allocate, BRIDGE_RANGE, set(), "192.168.137.10")
        self.assertEqual(error.code, "ip_out_of_range")

    def test_taken(self) -> None:
        """A wanted bridge address another node has is refused with ip_taken."""
        error = self.assertRaises(Conflict, allocate, BRIDGE, {IPv4Address("192.168.137.9")}, "192.168.137.9")
        self.assertEqual(error.code, "ip_taken")

    def test_gateway_inside_range(self) -> None:
        """A gateway inside the range is skipped."""
        network = NetworkConfig(
            mode="bridge", bridge="br0", gateway=IPv4Interface("10.0.0.1/24"), range=IPv4Network("10.0.0.0/29")
        )
        self.assertEqual([lease.ip for lease in exhaust(self, network)],
                         [IPv4Address(f"10.0.0.{n}") for n in range(2, 7)])

    def test_single_address_range(self) -> None:
        """A /32 (or /31) range inside the gateway's network hands out its address(es)."""
        gateway = IPv4Interface("192.168.1.1/24")
        one = NetworkConfig(mode="bridge", bridge="br0", gateway=gateway, range=IPv4Network("192.168.1.10/32"))
        self.assertEqual(allocate(one, set()).ip, IPv4Address("192.168.1.10"))
        two = NetworkConfig(mode="bridge", bridge="br0", gateway=gateway, range=IPv4Network("192.168.1.10/31"))
        self.assertEqual([lease.ip for lease in exhaust(self, two)],
                         [IPv4Address("192.168.1.10"), IPv4Address("192.168.1.11")])


    @given(bridge_networks(), st.data())
    @settings(max_examples=200, deadline=None)
    def test_bridge_lease_of_allocate(self, network: NetworkConfig, data: st.DataObject) -> None:
        """lease_of(allocate(...).ip) is that lease; the address is in the pool and is not the gateway's."""
        lease = allocate(network, set())
        self.assertEqual(lease_of(network, lease.ip), lease)
        self.assertIn(lease.ip, pool(network))
        self.assertNotEqual(lease.ip, network.gateway.ip)
        self.assertEqual(lease.gateway, network.gateway.ip)
        self.assertEqual(lease.address.network, network.gateway.network)

    @given(bridge_networks(max_hosts_prefix=24))
    @settings(max_examples=50, deadline=None)
    def test_bridge_exhaustion(self, network: NetworkConfig) -> None:
        """Allocating until full yields exactly slots() distinct addresses, then Conflict no_free_address."""
        leases = exhaust(self, network)
        self.assertEqual(len(leases), slots(network))
        self.assertEqual(len({lease.ip for lease in leases}), len(leases))
        for lease in leases:
            self.assertEqual(lease_of(network, lease.ip), lease)
