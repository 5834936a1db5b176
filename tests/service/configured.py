"""
What the tests of :mod:`vmservice.service` share: :class:`ConfiguredCase`,
a built image and a configuration naming it.
"""

from __future__ import annotations

import json
import os

from twisted.trial.unittest import SynchronousTestCase

from vmservice.config import ApiConfig, Config, HostGroupConfig


class ConfiguredCase(SynchronousTestCase):
    """A built image and a configuration naming it, its state and tmpfs directories the test's own."""

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        self.image_dir = os.path.join(self.base, "images")
        os.makedirs(os.path.join(self.image_dir, "default-1"))
        for name in ("vmlinux", "initrd.img", "rootfs.ext4"):
            with open(os.path.join(self.image_dir, "default-1", name), "wb") as f:
                f.write(b"x")
        with open(os.path.join(self.image_dir, "default-1", "manifest.json"), "w") as f:
            json.dump({"name": "default"}, f)
        os.symlink("default-1", os.path.join(self.image_dir, "default"))
        # The daemon's directories in the tmpfs go here, not in /dev/shm.
        self.shm = os.path.join(self.base, "shm")
        os.makedirs(self.shm)

    def config(self, image: str = "default", stats_interval: float = 15.0) -> Config:
        return Config(
            stats_interval=stats_interval,
            state_dir=os.path.join(self.base, "state"),
            templates_tmpfs_dir=self.shm,
            image_dir=self.image_dir,
            image=image,
            api=ApiConfig(bind_address="127.0.0.1", port=18080),
            host_groups=(HostGroupConfig(name="demo", vcpu=1, ram_bytes=256 << 20),),
        )
