# -*- test-case-name: tests.config.test_resolve_groups -*-
"""
Tests for :mod:`vmservice.config.resolve_groups`: the host groups' values checked and resolved.
"""

from __future__ import annotations

from ipaddress import IPv4Interface, IPv4Network

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.config.parsing import ConfigErrorCase, GiB, MiB, group_text, parse_text
from vmservice.config import ConfigError, NetworkConfig


class RamTests(SynchronousTestCase):
    """A group's memory, given in one of three units."""

    def test_ramUnits(self) -> None:
        """
        ``ram_gb``, ``ram_mb`` and ``ram_bytes`` all resolve to ``ram_bytes``.
        """
        for key, value, expected in (
            ("ram_gb", 2, 2 * GiB),
            ("ram_mb", 384, 384 * MiB),
            ("ram_bytes", MiB, MiB),
        ):
            group = parse_text(group_text(f"name: a\n{key}: {value}")).host_groups[0]
            self.assertEqual(group.ram_bytes, expected, key)


class NetworkTests(SynchronousTestCase):
    """
    The optional ``network`` section of a group.
    """

    def test_isolated(self) -> None:
        """
        An isolated network keeps its range and allow/drop lists as networks.
        """
        group = parse_text(group_text("""\
                name: a
                network:
                  mode: isolated
                  range: 10.77.0.0/22
                  allow: [10.0.0.0/8]
                  drop: [192.168.0.0/16, 172.16.0.0/12]
                """)).host_groups[0]
        self.assertEqual(
            group.network,
            NetworkConfig(
                mode="isolated",
                range=IPv4Network("10.77.0.0/22"),
                allow=(IPv4Network("10.0.0.0/8"),),
                drop=(IPv4Network("192.168.0.0/16"), IPv4Network("172.16.0.0/12")),
            ),
        )

    def test_bridge(self) -> None:
        """
        A bridge network keeps its bridge name and gateway address.
        """
        group = parse_text(group_text("""\
                name: a
                network:
                  mode: bridge
                  bridge: br0
                  range: 192.168.137.128/25
                  gateway: 192.168.137.1/24
                """)).host_groups[0]
        self.assertEqual(
            group.network,
            NetworkConfig(
                mode="bridge",
                range=IPv4Network("192.168.137.128/25"),
                bridge="br0",
                gateway=IPv4Interface("192.168.137.1/24"),
            ),
        )

    def test_countFitsSlots(self) -> None:
        """
        An isolated /22 holds exactly 256 VMs.
        """
        text = group_text("name: a\ncount: 256\nnetwork: {mode: isolated, range: 10.77.0.0/22}")
        self.assertEqual(parse_text(text).host_groups[0].count, 256)

    def test_separateRanges(self) -> None:
        """
        Groups with adjacent ranges that do not overlap are accepted.
        """
        config = parse_text(
            "config:\n  host_groups:\n"
            "    - {name: a, network: {mode: isolated, range: 10.77.0.0/22}}\n"
            "    - {name: b, network: {mode: isolated, range: 10.77.4.0/22}}\n"
        )
        self.assertEqual(len(config.host_groups), 2)


class ErrorTests(ConfigErrorCase):
    """Every kind of mistake gives one ``ConfigError`` with the key path, a message and the line of the key."""

    def test_ramTwice(self) -> None:
        """
        Memory may be given in one unit only.
        """
        self.assertConfigError(
            group_text("name: a\nram_gb: 1\nram_mb: 512"),
            "config.host_groups[0].ram_mb: give only one of ram_gb, ram_mb, ram_bytes (found ram_gb, ram_mb)",
            5,
        )

    def test_ramNotPositive(self) -> None:
        """
        ``ram_gb: 0`` (or any memory of zero or less) is refused.
        """
        self.assertConfigError(
            group_text("name: a\nram_gb: 0"), "config.host_groups[0].ram_gb: ram_gb 0 must be positive", 4
        )
        self.assertConfigError(
            group_text("name: a\nram_mb: -5"), "config.host_groups[0].ram_mb: ram_mb -5 must be positive", 4
        )

    def test_ramWholeMiB(self) -> None:
        """
        ``ram_bytes`` must be a whole number of MiB, which QEMU's ``-m`` takes.
        """
        self.assertConfigError(
            group_text("name: a\nram_bytes: 1000000"),
            "config.host_groups[0].ram_bytes: ram_bytes 1000000 must be a whole number of MiB",
            4,
        )

    def test_badGroupNames(self) -> None:
        """
        Group names must be usable as hostname prefixes.
        """
        rule = (
            "expected 1-20 characters: lowercase letters, digits and '-', "
            "starting with a letter and not ending with '-'"
        )
        for name in ("Demo", "1demo", "demo-", "de_mo", "de.mo", "''", "abcdefghijklmnopqrstu"):
            shown = "''" if name == "''" else repr(name)
            self.assertConfigError(
                group_text(f"name: {name}"), f"config.host_groups[0].name: bad group name {shown} ({rule})", 3
            )

    @given(st.from_regex(r"[a-z](?:[a-z0-9-]{0,18}[a-z0-9])?", fullmatch=True))
    def test_goodGroupNames(self, name: str) -> None:
        """
        Every name of lowercase letters, digits and inner dashes, starting with
        a letter and at most 20 characters long, is accepted.
        """
        self.assertEqual(parse_text(group_text(f"name: '{name}'")).host_groups[0].name, name)

    def test_countNegative(self) -> None:
        """
        ``count`` must not be negative.
        """
        self.assertConfigError(
            group_text("name: a\ncount: -1"), "config.host_groups[0].count: count -1 must not be negative", 4
        )

    def test_vcpuBelowOne(self) -> None:
        """
        ``vcpu`` must be at least 1.
        """
        self.assertConfigError(
            group_text("name: a\nvcpu: 0"), "config.host_groups[0].vcpu: vcpu 0 must be at least 1", 4
        )

    def test_overlappingRanges(self) -> None:
        """
        Two groups whose ranges overlap are refused, naming both.
        """
        self.assertConfigError(
            "config:\n  host_groups:\n"
            "    - {name: a, network: {mode: isolated, range: 10.77.0.0/16}}\n"
            "    - {name: b, network: {mode: isolated, range: 10.77.4.0/22}}\n",
            "config.host_groups[1].network.range: range 10.77.4.0/22 overlaps "
            "config.host_groups[0].network.range (10.77.0.0/16)",
            4,
        )

    def test_isolatedRules(self) -> None:
        """
        Isolated mode needs a range of at least a /30, no more VMs than slots,
        and no bridge settings.
        """
        prefix = "config.host_groups[0]"
        self.assertConfigError(
            group_text("name: a\nnetwork: {mode: isolated}"),
            f"{prefix}.network.range: required for mode isolated",
            4,
        )
        self.assertConfigError(
            group_text("name: a\nnetwork: {mode: isolated, range: 10.0.0.0/31}"),
            f"{prefix}.network.range: range 10.0.0.0/31 is too small "
            "(isolated mode gives each VM a /30, so use at most /30)",
            4,
        )
        self.assertConfigError(
            group_text("name: a\ncount: 257\nnetwork: {mode: isolated, range: 10.77.0.0/22}"),
            f"{prefix}.count: count 257 exceeds the 256 VM slots of network.range 10.77.0.0/22",
            4,
        )
        self.assertConfigError(
            group_text("name: a\nnetwork: {mode: isolated, range: 10.77.0.0/22, bridge: br0}"),
            f"{prefix}.network.bridge: only allowed with mode bridge",
            4,
        )

    def test_bridgeRules(self) -> None:
        """
        Bridge mode needs a valid bridge name, takes no allow/drop lists, and
        its range must lie in the gateway's network, given as a host address.
        """
        prefix = "config.host_groups[0].network"
        self.assertConfigError(
            group_text("name: a\nnetwork: {mode: bridge}"), f"{prefix}.bridge: required for mode bridge", 4
        )
        self.assertConfigError(
            group_text("name: a\nnetwork: {mode: bridge, bridge: a-very-long-bridge}"),
            f"{prefix}.bridge: bad bridge name 'a-very-long-bridge' (expected 1-15 letters, digits, '_', '.' or '-')",
            4,
        )
        self.assertConfigError(
            group_text("name: a\nnetwork: {mode: bridge, bridge: br0, drop: [10.0.0.0/8]}"),
            f"{prefix}.drop: only allowed with mode isolated",
            4,
        )
        self.assertConfigError(
            group_text(
                "name: a\nnetwork: {mode: bridge, bridge: br0, range: 10.0.0.0/24, gateway: 192.168.137.1/24}"
            ),
            f"{prefix}.range: range 10.0.0.0/24 is outside the gateway's network 192.168.137.0/24",
            4,
        )
        self.assertConfigError(
            group_text("name: a\nnetwork: {mode: bridge, bridge: br0, gateway: 192.168.137.0/24}"),
            f"{prefix}.gateway: bad address '192.168.137.0/24' (not a host address of 192.168.137.0/24)",
            4,
        )


class ForkMemoryTests(SynchronousTestCase):
    """``fork_memory`` per group: ``copy`` unless ``file`` is asked for; ``file`` not with ``warm``."""

    def test_default_and_given(self) -> None:
        config = parse_text("config: {host_groups: [{name: a}, {name: b, fork_memory: file}, {name: c, fork_memory: copy}]}\n")
        self.assertEqual([group.fork_memory for group in config.host_groups], ["copy", "file", "copy"])

    def test_bad(self) -> None:
        with self.assertRaisesRegex(ConfigError, "unknown fork_memory 'shared'"):
            parse_text("config: {host_groups: [{name: a, fork_memory: shared}]}\n")
        with self.assertRaisesRegex(ConfigError, "cannot be used with warm"):
            parse_text("config: {host_groups: [{name: a, fork_memory: file, warm: true}]}\n")


class GpuTests(SynchronousTestCase):
    """``host_groups[].gpus``: the PCI addresses of a group's GPUs."""

    def test_gpus(self) -> None:
        """Addresses are kept in order, short ones made full and lower case; none by default."""
        config = parse_text(group_text("""
            name: gpu
            gpus: ["01:00.0", "0000:AF:00.0"]
        """))
        self.assertEqual(config.host_groups[0].gpus, ("0000:01:00.0", "0000:af:00.0"))
        self.assertEqual(parse_text(group_text("name: demo")).host_groups[0].gpus, ())

    def test_bad_address(self) -> None:
        """A GPU that is not a PCI address is refused at its key path and line."""
        error = self.assertRaises(ConfigError, parse_text, group_text("""
            name: gpu
            gpus:
              - "01:00.0"
              - gpu0
        """))
        self.assertEqual(error.path, "config.host_groups[0].gpus[1]")
        self.assertIn("'gpu0' is not a PCI address", error.message)
        self.assertEqual(error.line, 6)

    def test_duplicate(self) -> None:
        """The same GPU twice in a group (in any spelling) is refused."""
        error = self.assertRaises(ConfigError, parse_text, group_text("""
            name: gpu
            gpus: ["01:00.0", "0000:01:00.0"]
        """))
        self.assertEqual(str(error), "config.host_groups[0].gpus[1]: duplicate GPU 0000:01:00.0")


class IdleSuspendTests(SynchronousTestCase):
    """``idle_suspend`` per group: how long a node may be idle before it is suspended."""

    def test_default_and_given(self) -> None:
        """Off unless given (or null); a Go duration in seconds otherwise."""
        config = parse_text("config: {host_groups: [{name: a}, {name: b, idle_suspend: 10m}, "
                        "{name: c, idle_suspend: 1m30s}, {name: d, idle_suspend: null}]}\n")
        self.assertEqual([group.idle_suspend for group in config.host_groups], [None, 600.0, 90.0, None])

    def test_bad(self) -> None:
        """Not a duration, shorter than 1 s, or not a string: one line naming the key."""
        for value in ("abc", "0s", "500ms", "-5m", "10"):
            with self.assertRaisesRegex(ConfigError, r"config\.host_groups\[0\]\.idle_suspend"):
                parse_text(f"config: {{host_groups: [{{name: a, idle_suspend: {value}}}]}}\n")


class GuestAslrTests(SynchronousTestCase):
    """``guest_aslr`` per group: whether the guests randomize their address spaces."""

    def test_default_and_given(self) -> None:
        """On unless a group says ``guest_aslr: false``."""
        config = parse_text("config: {host_groups: [{name: a}, {name: b, guest_aslr: false}, {name: c, guest_aslr: true}]}\n")
        self.assertEqual([group.guest_aslr for group in config.host_groups], [True, False, True])

    def test_bad(self) -> None:
        """Only a YAML boolean."""
        for value in ("0", "off2", "'no'"):
            with self.assertRaisesRegex(ConfigError, "guest_aslr"):
                parse_text(f"config: {{host_groups: [{{name: a, guest_aslr: {value}}}]}}\n")


class AgentTransportTests(SynchronousTestCase):
    """``agent_transport``: per group, inherited from the top level."""

    def test_default_inherited_and_given(self) -> None:
        """``auto`` by default; a group without one takes the top level's; a group's own wins."""
        self.assertEqual(parse_text("config: {host_groups: [{name: a}]}\n").host_groups[0].agent_transport, "auto")
        config = parse_text("config: {agent_transport: virtio-serial, host_groups: "
                            "[{name: a}, {name: b, agent_transport: vsock}, {name: c, agent_transport: auto}]}\n")
        self.assertEqual(config.agent_transport, "virtio-serial")
        self.assertEqual([group.agent_transport for group in config.host_groups], ["virtio-serial", "vsock", "auto"])

    def test_bad(self) -> None:
        """Another word, at either level, is a config error naming the key's place."""
        with self.assertRaisesRegex(ConfigError, r"config\.host_groups\[0\]\.agent_transport"):
            parse_text("config: {host_groups: [{name: a, agent_transport: serial}]}\n")
        with self.assertRaisesRegex(ConfigError, r"config\.agent_transport"):
            parse_text("config: {agent_transport: hvsock, host_groups: [{name: a}]}\n")
