# -*- test-case-name: tests.config.test_document -*-
"""
Tests for :mod:`vmservice.config.document`: what a group may leave to the top level, and a document's record.
"""

from __future__ import annotations

import attrs
from twisted.trial.unittest import SynchronousTestCase

from tests.config.parsing import parse_text
from vmservice.config import Config, HostGroupConfig
from vmservice.config.document import ConfigDocument, GroupDocument
from vmservice.config.model import GroupKeys, RootKeys


#: A top level with its own image and graceful_shutdown, and a group ``a`` (its keys indented by six spaces).
_TOP = "config:\n  image: tiny\n  graceful_shutdown: false\n  host_groups:\n    - name: a\n"


class InheritanceTests(SynchronousTestCase):
    """
    Groups inherit ``image``, ``hypervisor`` and ``graceful_shutdown``.
    """

    def test_inherited(self) -> None:
        """
        A group without its own values takes the top-level ones.
        """
        config = parse_text(_TOP)
        group = config.host_groups[0]
        self.assertEqual((group.image, group.hypervisor, group.graceful_shutdown), ("tiny", "qemu", False))

    def test_overridden(self) -> None:
        """
        A group's own values win over the top-level ones.
        """
        config = parse_text(_TOP + "      image: big\n      hypervisor: qemu\n      graceful_shutdown: true\n")
        group = config.host_groups[0]
        self.assertEqual((group.image, group.hypervisor, group.graceful_shutdown), ("big", "qemu", True))


class RecordTests(SynchronousTestCase):
    """A document shares its keys with its record (declared once) and makes the record of them."""

    def test_keys_declared_once(self) -> None:
        """A document and its record share RootKeys' or GroupKeys' keys and, besides, only those resolved apart."""
        def names(cls: type) -> set[str]:
            return {field.name for field in attrs.fields(cls)}

        self.assertEqual(names(ConfigDocument) & names(Config), names(RootKeys) | {"image_dir", "host_groups", "kubernetes", "e2b"})
        self.assertEqual(names(GroupDocument) & names(HostGroupConfig),
                         names(GroupKeys) | {"ram_bytes", "image", "hypervisor", "graceful_shutdown", "idle_suspend",
                                               "agent_transport"})

    def test_record(self) -> None:
        """The record takes the shared keys as the document holds them and the others as given."""
        group = GroupDocument(name="a", count=2, ram_mb=512, image=None, idle_suspend="10m", warm_spare=3)
        record = group.record(ram_bytes=512 << 20, image="tiny", hypervisor="qemu", graceful_shutdown=False,
                              idle_suspend=600.0, agent_transport="vsock")
        self.assertEqual(record, HostGroupConfig(name="a", count=2, warm_spare=3, ram_bytes=512 << 20, image="tiny",
                                                 graceful_shutdown=False, idle_suspend=600.0, agent_transport="vsock"))
        document = ConfigDocument(state_dir="/s", image_dir=None, host_groups=(group,), stats_interval=0)
        self.assertEqual(document.record(image_dir="/i", host_groups=(record,)),
                         Config(state_dir="/s", image_dir="/i", host_groups=(record,), stats_interval=0))
