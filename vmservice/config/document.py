# -*- test-case-name: tests.test_config -*-
"""
How the file writes what :class:`~vmservice.config.model.Config` and
:class:`~vmservice.config.model.HostGroupConfig` mean: the root and a host
group, key for key, where the file's shape is not the record's.  A group
gives its RAM as one of three keys (``ram_gb``, ``ram_mb``, ``ram_bytes``),
may leave ``image``, ``hypervisor`` and ``graceful_shutdown`` to the top
level, and writes ``idle_suspend`` as a duration; the root may leave
``image_dir`` to the environment.  ``None`` means "not given" where the
meaning of absence is decided later (inheritance, the environment, "exactly
one of"); everything else has its default here.  Every other section is
read straight into its record (:mod:`vmservice.config.model`).
"""

from __future__ import annotations

import attrs

from .defaults import (
    DEFAULT_CODEHOST_TIMEOUT,
    DEFAULT_CODEHOST_URL,
    DEFAULT_CONSOLE_LOG_SIZE,
    DEFAULT_STATE_DIR,
    DEFAULT_STATS_INTERVAL,
    DEFAULT_STORAGE_SIZE,
    DEFAULT_TCG_TB_SIZE_MB,
    DEFAULT_TEMPLATES_TMPFS_BUDGET,
    DEFAULT_TEMPLATES_TMPFS_DIR,
)
from .model import AdmissionConfig, ApiConfig, AuditConfig, LimitsConfig, NetworkConfig
from .values import PciText, Size, SpareCount


@attrs.frozen
class GroupDocument:
    """One entry of ``config.host_groups`` key for key, as the file writes it."""

    name: str
    count: int = 0
    vcpu: int = 1
    ram_gb: int | None = None
    ram_mb: int | None = None
    ram_bytes: int | None = None
    storage: str = "image"
    storage_size: Size = DEFAULT_STORAGE_SIZE
    image: str | None = None
    hypervisor: str | None = None
    graceful_shutdown: bool | None = None
    persistent: bool = False
    network: NetworkConfig | None = None
    userdata: str = ""
    gpus: tuple[PciText, ...] = ()
    warm: bool = False
    max_nodes: int | None = None
    idle_suspend: str | None = None
    warm_spare: SpareCount = 1
    fork_memory: str = "copy"
    guest_aslr: bool = True


@attrs.frozen
class ConfigDocument:
    """The ``config:`` section key for key, as the file writes it."""

    api: ApiConfig = ApiConfig()
    state_dir: str = DEFAULT_STATE_DIR
    image_dir: str | None = None
    image: str = "default"
    hypervisor: str = "qemu"
    graceful_shutdown: bool = True
    accel: str = "auto"
    host_groups: tuple[GroupDocument, ...] = ()
    codehost_url: str | None = DEFAULT_CODEHOST_URL
    codehost_timeout: float = DEFAULT_CODEHOST_TIMEOUT
    stats_interval: float = DEFAULT_STATS_INTERVAL
    templates_tmpfs_dir: str = DEFAULT_TEMPLATES_TMPFS_DIR
    templates_tmpfs_budget: Size = DEFAULT_TEMPLATES_TMPFS_BUDGET
    admission: AdmissionConfig = AdmissionConfig()
    tcg_tb_size_mb: int = DEFAULT_TCG_TB_SIZE_MB
    limits: LimitsConfig = LimitsConfig()
    console_log_size: Size = DEFAULT_CONSOLE_LOG_SIZE
    audit: AuditConfig = AuditConfig()
