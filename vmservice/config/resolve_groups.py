# -*- test-case-name: tests.config.test_resolve_groups -*-
"""
Checking and resolving the host groups (step 2 of loading, for
``config.host_groups``): names, counts, RAM, storage, inherited keys,
networks and their overlaps, GPUs, userdata, idle suspend, fork memory.
"""

from __future__ import annotations

import re

import attrs

from ..devices.pci import normalise_address
from ..durations import parse_go_duration
from ..errors import BadRequest
from ..structuring import Path, format_path
from .checks import Checks
from .defaults import (
    DEFAULT_RAM_BYTES,
    AGENT_TRANSPORTS,
    FORK_MEMORY_KINDS,
    HYPERVISORS,
    ISOLATED_SLOT_PREFIX,
    MAX_USERDATA,
    MIN_IDLE_SUSPEND,
    NETWORK_MODES,
    STORAGE_KINDS,
)
from .document import ConfigDocument, GroupDocument
from .model import HostGroupConfig, NetworkConfig
from .units import GiB, MiB

#: Group names become hostname prefixes (``<group>-<n>``), so they are kept to
#: a conservative subset of a DNS label: lowercase letters, digits and '-',
#: starting with a letter, not ending with '-', at most 20 characters (which
#: leaves room in the 63-character label for the counter).
_GROUP_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,18}[a-z0-9])?")
_GROUP_NAME_RULE = (
    "expected 1-20 characters: lowercase letters, digits and '-', "
    "starting with a letter and not ending with '-'"
)
#: Linux interface names: at most 15 bytes, no '/', ':' or white space.
_INTERFACE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")


class GroupChecks(Checks):
    """Turns the documents of host groups into :class:`HostGroupConfig` records."""

    def group(self, document: GroupDocument, parts: Path, top: ConfigDocument) -> HostGroupConfig:
        """One host group, its inherited keys filled in from ``top``."""
        if not _GROUP_NAME.fullmatch(document.name):
            raise self.error((*parts, "name"), f"bad group name {document.name!r} ({_GROUP_NAME_RULE})")
        if document.count < 0:
            raise self.error((*parts, "count"), f"count {document.count} must not be negative")
        if document.vcpu < 1:
            raise self.error((*parts, "vcpu"), f"vcpu {document.vcpu} must be at least 1")
        ram_bytes = self.ram(document, parts)
        storage = self.one_of(document.storage, STORAGE_KINDS, "storage", (*parts, "storage"))
        if document.storage_size == 0 or document.storage_size % 512:
            raise self.error(
                (*parts, "storage_size"),
                f"storage_size {document.storage_size} must be a positive multiple of 512 bytes",
            )
        image = top.image if document.image is None else self.nonempty(document.image, (*parts, "image"))
        if document.hypervisor is None:
            hypervisor = top.hypervisor
        else:
            hypervisor = self.one_of(document.hypervisor, HYPERVISORS, "hypervisor", (*parts, "hypervisor"))
        graceful = top.graceful_shutdown if document.graceful_shutdown is None else document.graceful_shutdown
        if document.agent_transport is None:
            transport = top.agent_transport
        else:
            transport = self.one_of(document.agent_transport, AGENT_TRANSPORTS, "agent_transport",
                                    (*parts, "agent_transport"))
        if document.max_nodes is not None and document.max_nodes < max(1, document.count):
            raise self.error((*parts, "max_nodes"), f"max_nodes {document.max_nodes} must be at least 1 and at least "
                                                    f"count ({document.count})")
        network = None
        if document.network is not None:
            network = self.network(document.network, (*parts, "network"))
            if network.mode == "isolated" and network.range is not None:
                slots = 2 ** (ISOLATED_SLOT_PREFIX - network.range.prefixlen)
                if document.count > slots:
                    raise self.error(
                        (*parts, "count"),
                        f"count {document.count} exceeds the {slots} VM slots of network.range {network.range}",
                    )
        userdata = self.userdata(document.userdata, (*parts, "userdata"))
        gpus = self.gpus(document.gpus, (*parts, "gpus"))
        idle_suspend = self.idle_suspend(document.idle_suspend, (*parts, "idle_suspend"))
        checked = attrs.evolve(
            document,  # the shared keys checked; a key not named here is taken as read
            storage=storage,
            network=network,
            userdata=userdata,
            gpus=gpus,
            fork_memory=self.fork_memory(document, (*parts, "fork_memory")),
        )
        return checked.record(
            ram_bytes=ram_bytes, image=image, hypervisor=hypervisor, graceful_shutdown=graceful, idle_suspend=idle_suspend,
            agent_transport=transport,
        )

    def fork_memory(self, document: GroupDocument, parts: Path) -> str:
        """``copy`` or ``file``; ``file`` not with ``warm`` (a clone's memory is its template's file)."""
        kind = self.one_of(document.fork_memory, FORK_MEMORY_KINDS, "fork_memory", parts)
        if kind == "file" and document.warm:
            raise self.error(parts, "fork_memory: file cannot be used with warm: true "
                                    "(a clone's memory is its template's file)")
        return kind

    def idle_suspend(self, text: str | None, parts: Path) -> float | None:
        """A duration of at least 1 s (``10m``, ``30s``); ``None`` (absent or null) for never."""
        if text is None:
            return None
        try:
            seconds = parse_go_duration(text)
        except ValueError as error:
            raise self.error(parts, str(error)) from None
        if seconds < MIN_IDLE_SUSPEND:
            raise self.error(parts, f"idle_suspend {text!r} must be at least {MIN_IDLE_SUSPEND:g} s "
                                    "(leave it out for never)")
        return seconds

    def gpus(self, addresses: tuple[str, ...], parts: Path) -> tuple[str, ...]:
        """The GPU addresses in their full form, each once."""
        seen: list[str] = []
        for index, text in enumerate(addresses):
            try:
                address = normalise_address(text)
            except BadRequest as error:
                raise self.error((*parts, index), error.message) from None
            if address in seen:
                raise self.error((*parts, index), f"duplicate GPU {address}")
            seen.append(address)
        return tuple(seen)

    def userdata(self, text: str, parts: Path) -> str:
        """At most :data:`~vmservice.config.defaults.MAX_USERDATA` bytes (UTF-8)."""
        size = len(text.encode("utf-8"))
        if size > MAX_USERDATA:
            raise self.error(parts, f"userdata is {size} bytes; at most {MAX_USERDATA} bytes are allowed")
        return text

    def ram(self, document: GroupDocument, parts: Path) -> int:
        """The RAM in bytes from the one of ``ram_gb``, ``ram_mb``, ``ram_bytes`` given (or the default)."""
        given = [
            (key, value, unit)
            for key, value, unit in (
                ("ram_gb", document.ram_gb, GiB),
                ("ram_mb", document.ram_mb, MiB),
                ("ram_bytes", document.ram_bytes, 1),
            )
            if value is not None
        ]
        if not given:
            return DEFAULT_RAM_BYTES
        if len(given) > 1:
            keys = ", ".join(key for key, _, _ in given)
            raise self.error(
                (*parts, given[1][0]), f"give only one of ram_gb, ram_mb, ram_bytes (found {keys})"
            )
        key, value, unit = given[0]
        if value <= 0:
            raise self.error((*parts, key), f"{key} {value} must be positive")
        if (value * unit) % MiB:
            raise self.error((*parts, key), f"{key} {value} must be a whole number of MiB")
        return value * unit

    def network(self, document: NetworkConfig, parts: Path) -> NetworkConfig:
        """A group's ``network``, checked (as read: nothing to resolve): what each mode needs and allows."""
        mode = self.one_of(document.mode, NETWORK_MODES, "network mode", (*parts, "mode"))
        if mode == "isolated":
            if document.range is None:
                raise self.error((*parts, "range"), "required for mode isolated")
            if document.range.prefixlen > ISOLATED_SLOT_PREFIX:
                raise self.error(
                    (*parts, "range"),
                    f"range {document.range} is too small (isolated mode gives each VM "
                    f"a /{ISOLATED_SLOT_PREFIX}, so use at most /{ISOLATED_SLOT_PREFIX})",
                )
            for key in ("bridge", "gateway"):
                if getattr(document, key) is not None:
                    raise self.error((*parts, key), "only allowed with mode bridge")
        else:
            for key in ("allow", "drop"):
                if getattr(document, key):
                    raise self.error((*parts, key), "only allowed with mode isolated")
            if document.bridge is None:
                raise self.error((*parts, "bridge"), "required for mode bridge")
            if not _INTERFACE_NAME.fullmatch(document.bridge):
                raise self.error(
                    (*parts, "bridge"),
                    f"bad bridge name {document.bridge!r} (expected 1-15 letters, digits, '_', '.' or '-')",
                )
            if document.gateway is None:
                raise self.error((*parts, "gateway"), "required for mode bridge (the bridge's address and the VMs' route)")
            if (
                document.range is not None
                and document.gateway is not None
                and not document.range.subnet_of(document.gateway.network)
            ):
                raise self.error(
                    (*parts, "range"),
                    f"range {document.range} is outside the gateway's network {document.gateway.network}",
                )
        return document

    def check_overlaps(self, groups: list[HostGroupConfig], parts: Path) -> None:
        """
        Refuse groups whose ranges overlap: two VMs would get one address.
        """
        for later, group in enumerate(groups):
            if group.network is None or group.network.range is None:
                continue
            for earlier in range(later):
                other = groups[earlier].network
                if (
                    other is not None
                    and other.range is not None
                    and group.network.range.overlaps(other.range)
                ):
                    other_path = format_path((*parts, earlier, "network", "range"))
                    raise self.error(
                        (*parts, later, "network", "range"),
                        f"range {group.network.range} overlaps {other_path} ({other.range})",
                    )
