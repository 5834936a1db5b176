# -*- test-case-name: tests.config.test_values -*-
"""
Tests for :mod:`vmservice.config.values`: sizes, CIDRs, spare counts and PCI addresses as the file writes them.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.config.parsing import ConfigErrorCase, GiB, MiB, group_text, parse_text
from vmservice.config import ConfigError


class SizeValueTests(SynchronousTestCase):
    """A size as a key's value: a unit string or a plain byte count."""

    def test_storageSizeForms(self) -> None:
        """
        ``storage_size`` takes unit strings and plain byte integers.
        """
        for text, expected in (
            ("2G", 2 * GiB),
            ("512M", 512 * MiB),
            ("1.5G", 3 * GiB // 2),
            ("1048576", MiB),
        ):
            group = parse_text(group_text(f"name: a\nstorage_size: {text}")).host_groups[0]
            self.assertEqual(group.storage_size, expected, text)


class ErrorTests(ConfigErrorCase):
    """Every kind of mistake gives one ``ConfigError`` with the key path, a message and the line of the key."""

    def test_badSizes(self) -> None:
        """
        Sizes that do not parse, are fractional bytes, negative, zero or not
        sector multiples are refused.
        """
        self.assertConfigError(
            "config:\n  host_groups:\n    - name: a\n    - name: b\n      storage_size: 2X\n",
            "config.host_groups[1].storage_size: bad size '2X' (expected e.g. 2G, 512M or bytes)",
            5,
        )
        self.assertConfigError(
            group_text("name: a\nstorage_size: 0.1K"),
            "config.host_groups[0].storage_size: bad size '0.1K' (not a whole number of bytes)",
            4,
        )
        self.assertConfigError(
            group_text("name: a\nstorage_size: -1"),
            "config.host_groups[0].storage_size: bad size -1 (must not be negative)",
            4,
        )
        self.assertConfigError(
            group_text("name: a\nstorage_size: [2G]"),
            "config.host_groups[0].storage_size: expected a size (expected e.g. 2G, 512M or bytes), got a list",
            4,
        )
        for size in ("0", "1000"):
            self.assertConfigError(
                group_text(f"name: a\nstorage_size: {size}"),
                f"config.host_groups[0].storage_size: storage_size {size} must be a positive multiple of 512 bytes",
                4,
            )

    def test_badCidrs(self) -> None:
        """
        Ranges and allow/drop entries must be IPv4 networks written with a
        prefix length and no host bits.
        """
        network = "name: a\nnetwork:\n  mode: isolated\n  range: 10.0.0.0/22\n"
        cases = [
            (
                "  allow: [10.0.0.1/8]",
                "allow[0]: bad CIDR '10.0.0.1/8' (host bits set; did you mean 10.0.0.0/8?)",
            ),
            ("  drop: [10.0.0.0/8, nonsense/8]", "drop[1]: bad CIDR 'nonsense/8' (expected e.g. 10.0.0.0/8)"),
            ("  drop: [10.0.0.0]", "drop[0]: bad CIDR '10.0.0.0' (missing prefix length, e.g. 10.0.0.0/32)"),
            ("  allow: ['fd00::/8']", "allow[0]: bad CIDR 'fd00::/8' (only IPv4 is supported)"),
            ("  allow: [10]", "allow[0]: expected a CIDR such as 10.0.0.0/8, got integer 10"),
            ("  allow: 10.0.0.0/8", "allow: expected a list, got string '10.0.0.0/8'"),
            ("  allow: [10.0.0.0/33]", "allow[0]: bad CIDR '10.0.0.0/33' (expected e.g. 10.0.0.0/8)"),
        ]
        for line, message in cases:
            self.assertConfigError(group_text(network + line), f"config.host_groups[0].network.{message}", 7)
        self.assertConfigError(
            group_text("name: a\nnetwork:\n  mode: isolated\n  range: 10.77.0.1/22"),
            "config.host_groups[0].network.range: bad CIDR '10.77.0.1/22' (host bits set; did you mean 10.77.0.0/22?)",
            6,
        )


class WarmSpareTests(SynchronousTestCase):
    """``warm_spare`` per group: a boolean (1 or 0) or a count of spare VMs up to the bound."""

    def test_default_and_given(self) -> None:
        config = parse_text("config: {host_groups: [{name: a}, {name: b, warm_spare: true}, {name: c, warm_spare: false},"
                        " {name: d, warm_spare: 4}, {name: e, warm_spare: 0}, {name: f, warm_spare: 8}]}\n")
        self.assertEqual([group.warm_spare for group in config.host_groups], [1, 1, 0, 4, 0, 8])

    def test_bad(self) -> None:
        for value, message in (("9", "must be from 0 to 8"), ("-1", "must be from 0 to 8"),
                               ("'4'", "expected a boolean or a count"), ("1.5", "expected a boolean or a count")):
            with self.assertRaisesRegex(ConfigError, rf"host_groups\[0\]\.warm_spare: .*{message}"):
                parse_text(f"config: {{host_groups: [{{name: a, warm_spare: {value}}}]}}\n")


class GpuTests(SynchronousTestCase):
    """``host_groups[].gpus``: the PCI addresses of a group's GPUs."""

    def test_unquoted(self) -> None:
        """An unquoted address that YAML reads as a number is refused with a hint to quote it."""
        error = self.assertRaises(ConfigError, parse_text, group_text("""
            name: gpu
            gpus: [0000:01:00.0]
        """))
        self.assertEqual(error.path, "config.host_groups[0].gpus[0]")
        self.assertIn("in quotes", error.message)
