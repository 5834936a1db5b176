# -*- test-case-name: tests.config.test_resolve -*-
"""
Checking and resolving the configuration (step 2 of loading): the
documents and sections the converter read, checked value by value and
resolved into :class:`~vmservice.config.model.Config` (the host groups by
:class:`~vmservice.config.resolve_groups.GroupChecks`).
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse

import attrs

from ..structuring import Path, format_path
from .defaults import (
    ACCELERATORS,
    AGENT_TRANSPORTS,
    DEFAULT_CODEHOST_URL,
    DEFAULT_IMAGE_DIR,
    HYPERVISORS,
    IMAGE_DIR_ENVIRONMENT,
    MAX_AUDIT_KEEP,
    MAX_BACKGROUND_EXECS_PER_NODE,
    MAX_BOOT_CONCURRENCY,
    MAX_CODEHOST_TIMEOUT,
    MAX_CONNECTIONS,
    MAX_CONSOLE_LOG_SIZE,
    MAX_STATS_INTERVAL,
    MAX_TCG_TB_SIZE_MB,
    MIN_CONSOLE_LOG_SIZE,
)
from .document import ConfigDocument
from .model import AdmissionConfig, ApiConfig, AuditConfig, AuthConfig, Config, HostGroupConfig, LimitsConfig
from .resolve_e2b import E2bChecks
from .resolve_groups import GroupChecks
from .resolve_kubernetes import KubernetesChecks
from .units import MiB, format_size

#: A DNS name in ``api.allowed_hosts`` (lowercase labels of letters, digits, '-' and '_').
_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*")


def _remote_without_auth(address: str, auth: AuthConfig) -> bool:
    """Whether ``address`` is a TCP address other than a loopback one while ``auth`` is off."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False  # a UNIX socket: its file mode controls access
    return not ip.is_loopback and not auth.enabled


class Resolver(GroupChecks, KubernetesChecks, E2bChecks):
    """
    Turns checked documents into public records, raising :class:`~vmservice.config.error.ConfigError`
    with the line of the key at fault.
    """

    def config(self, document: ConfigDocument) -> Config:
        """The whole ``config:`` section, resolved."""
        base: Path = ("config",)
        api = self.api(document.api, (*base, "api"))
        state_dir = self.nonempty(document.state_dir, (*base, "state_dir"))
        if document.image_dir is None:
            image_dir = self.environ.get(IMAGE_DIR_ENVIRONMENT) or DEFAULT_IMAGE_DIR
        else:
            image_dir = self.nonempty(document.image_dir, (*base, "image_dir"))
        image = self.nonempty(document.image, (*base, "image"))
        hypervisor = self.one_of(document.hypervisor, HYPERVISORS, "hypervisor", (*base, "hypervisor"))
        accel = self.one_of(document.accel, ACCELERATORS, "accel", (*base, "accel"))
        transport = self.one_of(document.agent_transport, AGENT_TRANSPORTS, "agent_transport", (*base, "agent_transport"))
        document = attrs.evolve(document, agent_transport=transport)
        groups: list[HostGroupConfig] = []
        names: dict[str, int] = {}
        for index, group_document in enumerate(document.host_groups):
            parts = (*base, "host_groups", index)
            group = self.group(group_document, parts, document)
            if group.name in names:
                first = format_path((*base, "host_groups", names[group.name]))
                raise self.error((*parts, "name"), f"duplicate group name {group.name!r} (also {first})")
            names[group.name] = index
            groups.append(group)
        self.check_overlaps(groups, (*base, "host_groups"))
        checked = attrs.evolve(
            document,  # the shared keys checked; a key not named here is taken as read
            api=api,
            state_dir=state_dir,
            image=image,
            hypervisor=hypervisor,
            accel=accel,
            codehost_url=self.codehost_url(document.codehost_url, (*base, "codehost_url")),
            codehost_timeout=self.codehost_timeout(document.codehost_timeout, (*base, "codehost_timeout")),
            stats_interval=self.stats_interval(document.stats_interval, (*base, "stats_interval")),
            templates_tmpfs_dir=self.nonempty(document.templates_tmpfs_dir, (*base, "templates_tmpfs_dir")),
            admission=self.admission(document.admission, (*base, "admission")),
            tcg_tb_size_mb=self.tcg_tb_size_mb(document.tcg_tb_size_mb, (*base, "tcg_tb_size_mb")),
            limits=self.limits(document.limits, (*base, "limits")),
            console_log_size=self.console_log_size(document.console_log_size, (*base, "console_log_size")),
            audit=self.audit(document.audit, (*base, "audit")),
        )
        group_names = tuple(g.name for g in groups)
        kubernetes = self.kubernetes(document.kubernetes, (*base, "kubernetes"), api, group_names)
        e2b = self.e2b(document.e2b, (*base, "e2b"), api, group_names)
        return checked.record(image_dir=image_dir, host_groups=tuple(groups), kubernetes=kubernetes, e2b=e2b)

    def limits(self, document: LimitsConfig, parts: Path) -> LimitsConfig:
        """``limits``, checked (as read: nothing to resolve)."""
        if document.buffer_budget is not None and document.buffer_budget < MiB:
            raise self.error((*parts, "buffer_budget"), f"buffer_budget {document.buffer_budget} must be at least 1M")
        execs = document.background_execs_per_node
        if not 1 <= execs <= MAX_BACKGROUND_EXECS_PER_NODE:
            raise self.error((*parts, "background_execs_per_node"), f"background_execs_per_node {execs} must be from "
                                                                     f"1 to {MAX_BACKGROUND_EXECS_PER_NODE}")
        most = document.max_connections
        if not 1 <= most <= MAX_CONNECTIONS:
            raise self.error((*parts, "max_connections"), f"max_connections {most} must be from 1 to {MAX_CONNECTIONS}")
        per_peer = document.max_connections_per_peer
        if not 1 <= per_peer <= most:
            raise self.error((*parts, "max_connections_per_peer"), f"max_connections_per_peer {per_peer} must be "
                                                                    f"from 1 to max_connections ({most})")
        return document

    def audit(self, document: AuditConfig, parts: Path) -> AuditConfig:
        """``audit``, checked (as read: nothing to resolve)."""
        if document.path is not None and not os.path.isabs(document.path):
            raise self.error((*parts, "path"), f"path {document.path!r} must be an absolute path")
        if document.max_size < 64 * 1024:
            raise self.error((*parts, "max_size"), f"max_size {document.max_size} must be at least 64K")
        if not 0 <= document.keep <= MAX_AUDIT_KEEP:
            raise self.error((*parts, "keep"), f"keep {document.keep} must be from 0 to {MAX_AUDIT_KEEP}")
        return document

    def admission(self, document: AdmissionConfig, parts: Path) -> AdmissionConfig:
        """``admission``, checked (as read: nothing to resolve)."""
        if document.memory_budget is not None and document.memory_budget < MiB:
            raise self.error((*parts, "memory_budget"), f"memory_budget {document.memory_budget} must be at least 1M")
        concurrency = document.boot_concurrency
        if concurrency is not None and not 0 <= concurrency <= MAX_BOOT_CONCURRENCY:
            raise self.error((*parts, "boot_concurrency"), f"boot_concurrency {concurrency} must be from 0 (no bound) "
                                                           f"to {MAX_BOOT_CONCURRENCY}")
        return document

    def codehost_url(self, url: str | None, parts: Path) -> str | None:
        """An http(s) URL without credentials, query or fragment, its final ``/`` dropped; ``None`` when empty."""
        if url is None or not url.strip():
            return None
        try:
            split = urllib.parse.urlsplit(url)
            _ = split.port  # a port that is not a number raises here
        except ValueError:
            raise self.error(parts, f"bad URL {url!r} (expected e.g. {DEFAULT_CODEHOST_URL})") from None
        if split.scheme not in ("http", "https") or not split.hostname:
            raise self.error(parts, f"bad URL {url!r} (expected http:// or https:// and a host, "
                                    f"e.g. {DEFAULT_CODEHOST_URL})")
        if split.username is not None:
            raise self.error(parts, "bad URL: credentials in it are not accepted")
        if split.query or split.fragment or len(url.split()) != 1 or url != url.strip():
            raise self.error(parts, f"bad URL {url!r} (no query, fragment or white space)")
        return url.rstrip("/")

    def codehost_timeout(self, seconds: float, parts: Path) -> float:
        """More than 0 and at most :data:`~vmservice.config.defaults.MAX_CODEHOST_TIMEOUT` seconds."""
        if not 0 < seconds <= MAX_CODEHOST_TIMEOUT:
            raise self.error(parts, f"codehost_timeout {seconds:g} must be more than 0 and at most "
                                    f"{MAX_CODEHOST_TIMEOUT:g} seconds")
        return seconds

    def tcg_tb_size_mb(self, size: int, parts: Path) -> int:
        """0 (QEMU's default) or up to :data:`~vmservice.config.defaults.MAX_TCG_TB_SIZE_MB` MiB."""
        if not 0 <= size <= MAX_TCG_TB_SIZE_MB:
            raise self.error(parts, f"tcg_tb_size_mb {size} must be 0 (QEMU's default) or from 1 to "
                                    f"{MAX_TCG_TB_SIZE_MB} MiB")
        return size

    def console_log_size(self, size: int, parts: Path) -> int:
        """Within :data:`~vmservice.config.defaults.MIN_CONSOLE_LOG_SIZE` and ``MAX_CONSOLE_LOG_SIZE``."""
        if not MIN_CONSOLE_LOG_SIZE <= size <= MAX_CONSOLE_LOG_SIZE:
            raise self.error(parts, f"console_log_size {format_size(size)} must be from "
                                    f"{format_size(MIN_CONSOLE_LOG_SIZE)} to {format_size(MAX_CONSOLE_LOG_SIZE)}")
        return size

    def stats_interval(self, seconds: float, parts: Path) -> float:
        """0 (off) or from 1 to :data:`~vmservice.config.defaults.MAX_STATS_INTERVAL` seconds."""
        if seconds != 0 and not 1 <= seconds <= MAX_STATS_INTERVAL:
            raise self.error(parts, f"stats_interval {seconds:g} must be 0 (off) or from 1 to "
                                    f"{MAX_STATS_INTERVAL:g} seconds")
        return seconds

    def api(self, document: ApiConfig, parts: Path) -> ApiConfig:
        """``api``, checked; its allowed hosts and origins in their canonical form."""
        address = document.bind_address
        try:
            ipaddress.ip_address(address)
        except ValueError:
            if "/" not in address:
                raise self.error(
                    (*parts, "bind_address"),
                    f"bad bind address {address!r} (expected an IP address, "
                    "or a UNIX socket path containing '/')",
                ) from None
        if not 0 <= document.port <= 65535:
            raise self.error((*parts, "port"), f"port {document.port} out of range (0-65535)")
        hosts = tuple(self.allowed_host(host, (*parts, "allowed_hosts", i))
                      for i, host in enumerate(document.allowed_hosts))
        origins = tuple(self.allowed_origin(origin, (*parts, "allowed_origins", i))
                        for i, origin in enumerate(document.allowed_origins))
        token_file = document.auth.token_file
        if token_file is not None and not os.path.isabs(token_file):
            raise self.error((*parts, "auth", "token_file"), f"token_file {token_file!r} must be an absolute path")
        if _remote_without_auth(address, document.auth) and not document.allow_unauthenticated_remote:
            raise self.error(
                (*parts, "bind_address"),
                f"{address} is not a loopback address and auth is off: anyone who reaches it could drive "
                "the daemon; turn api.auth.enabled on, or set api.allow_unauthenticated_remote: true",
            )
        return attrs.evolve(document, allowed_hosts=hosts, allowed_origins=origins)

    def allowed_host(self, text: str, parts: Path) -> str:
        """An entry of ``api.allowed_hosts``: a host name or an IP address, without a port; lowercased."""
        host = text.strip().lower().rstrip(".")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            return ipaddress.ip_address(host).compressed
        except ValueError:
            pass
        if not _HOST_NAME.fullmatch(host):
            raise self.error(parts, f"bad host name {text!r} (expected a name such as vms.example.com, "
                                    "or an IP address, without a port)")
        return host

    def allowed_origin(self, text: str, parts: Path) -> str:
        """
        An entry of ``api.allowed_origins``: ``http(s)://host[:port]`` exactly
        as browsers send it in ``Origin`` (lowercase, no default port, no path).
        """
        split = urllib.parse.urlsplit(text)
        try:
            port = split.port
        except ValueError:
            port = -1
        canonical = f"{split.scheme}://{split.netloc}".lower()
        if (split.scheme not in ("http", "https") or not split.hostname or split.path or split.query
                or split.fragment or split.username is not None or port == -1
                or port == {"http": 80, "https": 443}[split.scheme] or text != canonical):
            raise self.error(parts, f"bad origin {text!r} (expected scheme://host[:port] as a browser sends it, "
                                    "e.g. https://vms.example.com or http://127.0.0.1:3000: lowercase, "
                                    "no path, no default port)")
        return text
