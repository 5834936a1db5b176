# -*- test-case-name: tests.config.test_checks -*-
"""
Tests for :class:`~vmservice.config.checks.Checks`: a value not empty, one of a list.
"""

from __future__ import annotations

from tests.config.parsing import ConfigErrorCase, group_text


class ErrorTests(ConfigErrorCase):
    """Every kind of mistake gives one ``ConfigError`` with the key path, a message and the line of the key."""

    def test_emptyStrings(self) -> None:
        """
        Directories and image names must not be empty.
        """
        self.assertConfigError("config:\n  state_dir: ''\n", "config.state_dir: must not be empty", 2)
        self.assertConfigError("config:\n  image_dir: ' '\n", "config.image_dir: must not be empty", 2)
        self.assertConfigError(
            group_text("name: a\nimage: ''"), "config.host_groups[0].image: must not be empty", 4
        )

    def test_unknownChoices(self) -> None:
        """
        Values outside the known choices are refused, listing the choices.
        """
        self.assertConfigError(
            "config:\n  hypervisor: firecracker\n",
            "config.hypervisor: unknown hypervisor 'firecracker' (expected one of: qemu)",
            2,
        )
        self.assertConfigError(
            group_text("name: a\nhypervisor: xen"),
            "config.host_groups[0].hypervisor: unknown hypervisor 'xen' (expected one of: qemu)",
            4,
        )
        self.assertConfigError(
            "config:\n  accel: hvf\n",
            "config.accel: unknown accel 'hvf' (expected one of: auto, kvm, tcg)",
            2,
        )
        self.assertConfigError(
            group_text("name: a\nstorage: zfs"),
            "config.host_groups[0].storage: unknown storage 'zfs' (expected one of: image)",
            4,
        )
        self.assertConfigError(
            group_text("name: a\nnetwork: {mode: nat}"),
            "config.host_groups[0].network.mode: unknown network mode 'nat' (expected one of: isolated, bridge)",
            4,
        )
