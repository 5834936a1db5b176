# -*- test-case-name: tests.config.test_defaults -*-
"""
Tests for :mod:`vmservice.config.defaults`: what the keys a file leaves out mean.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.config.parsing import GiB, MiB, group_text, parse_text
from vmservice.config import ApiConfig, AuthConfig, Config, HostGroupConfig


class DefaultsTests(SynchronousTestCase):
    """
    What an almost empty file means.
    """

    def test_emptyConfig(self) -> None:
        """
        ``config: {}`` gives every documented default.
        """
        config = parse_text("config: {}\n")
        self.assertEqual(config, Config())
        self.assertEqual(
            config.api, ApiConfig(bind_address="127.0.0.1", port=8080, auth=AuthConfig(enabled=False))
        )
        self.assertEqual(
            (config.state_dir, config.image_dir, config.image, config.hypervisor),
            ("/var/lib/vmservice", "/var/cache/vmservice/images", "default", "qemu"),
        )
        self.assertEqual((config.graceful_shutdown, config.accel, config.host_groups), (True, "auto", ()))

    def test_groupDefaults(self) -> None:
        """
        A group with only a name has count 0, one vCPU, 256 MiB, a 2 GiB image
        disk, no network and is not persistent.
        """
        group = parse_text(group_text("name: a")).host_groups[0]
        self.assertEqual(group, HostGroupConfig(name="a"))
        self.assertEqual(
            (group.count, group.vcpu, group.ram_bytes, group.storage, group.storage_size),
            (0, 1, 256 * MiB, "image", 2 * GiB),
        )
        self.assertEqual((group.persistent, group.network, group.arch), (False, None, "x86_64"))
