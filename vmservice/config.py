# -*- test-case-name: tests.test_config -*-
"""
The daemon's configuration: a YAML file with a ``config:`` root, in the shape
of Slicer's configuration, read into frozen attrs records.

Loading happens in two steps, so that each step does one job:

1. **Shape.** The YAML is structured by a strict cattrs converter into private
   ``_*Document`` classes that mirror the file key for key: unknown keys are
   refused (``forbid_extra_keys``), a string is never coerced into an integer
   and a boolean must be a YAML boolean. cattrs reports every problem as an
   exception group with notes naming the attribute or list index; we walk that
   group to get the key path.
2. **Meaning.** The documents are checked value by value (names, ranges,
   sizes, overlaps) and resolved into the public records :class:`Config`,
   :class:`ApiConfig`, :class:`AuthConfig`, :class:`HostGroupConfig` and
   :class:`NetworkConfig`. Inherited values (a group's ``image``,
   ``hypervisor`` and ``graceful_shutdown``) are filled in from the top level,
   so the rest of the program never has to know about inheritance.

Every problem becomes one :class:`ConfigError` whose ``str()`` is a single
line, ``<key path>: <what is wrong>``, and which knows the line of the file
the key is on. The daemon prints it and exits with status 1.
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from collections.abc import Mapping
from ipaddress import IPv4Interface, IPv4Network
from typing import NewType

import attrs
import cattrs
import yaml

from .devices.pci import normalise_address
from .durations import parse_go_duration
from .errors import BadRequest
from .structuring import BadValue, Path, describe, format_path, strict_converter, structure_errors

__all__ = [
    "AdmissionConfig",
    "AuditConfig",
    "ApiConfig",
    "AuthConfig",
    "Config",
    "ConfigError",
    "DEFAULT_CODEHOST_TIMEOUT",
    "DEFAULT_CODEHOST_URL",
    "DEFAULT_IMAGE_DIR",
    "DEFAULT_RAM_BYTES",
    "DEFAULT_STATE_DIR",
    "DEFAULT_STORAGE_SIZE",
    "HostGroupConfig",
    "LimitsConfig",
    "NetworkConfig",
    "format_size",
    "load_config",
    "parse_config",
    "parse_size",
]

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

#: Where node records and runtime files live unless ``state_dir`` says otherwise.
DEFAULT_STATE_DIR = "/var/lib/vmservice"
#: Where built guest images live unless ``image_dir`` or the environment
#: variable ``VMSERVICE_IMAGE_DIR`` says otherwise.
DEFAULT_IMAGE_DIR = "/var/cache/vmservice/images"
#: The environment variable that overrides :data:`DEFAULT_IMAGE_DIR`; the
#: Makefile exports it so that the daemon finds the image ``make image`` built.
IMAGE_DIR_ENVIRONMENT = "VMSERVICE_IMAGE_DIR"
#: Guest memory when a group gives none of ``ram_gb``, ``ram_mb``, ``ram_bytes``.
DEFAULT_RAM_BYTES = 256 * MiB
#: Disk size of a node when a group gives no ``storage_size``.
DEFAULT_STORAGE_SIZE = 2 * GiB
#: Most bytes of userdata, a group's and a node's together (the guest takes no more).
MAX_USERDATA = 512 * 1024
#: The code host whose users' published SSH keys ``codehost_user`` takes,
#: unless ``codehost_url`` names another (or none).
DEFAULT_CODEHOST_URL = "https://github.com"
#: The shortest ``idle_suspend`` of a host group, in seconds.
MIN_IDLE_SUSPEND = 1.0
#: Seconds a fetch of those keys may take unless ``codehost_timeout`` says otherwise.
DEFAULT_CODEHOST_TIMEOUT = 5.0
#: The longest ``codehost_timeout``: a create waits for the fetch.
MAX_CODEHOST_TIMEOUT = 60.0
#: Seconds between two samplings of every node's statistics for ``/metrics``, unless ``stats_interval``
#: says otherwise; 0 turns the per-node series off.
DEFAULT_STATS_INTERVAL = 15.0
#: Where templates keep their RAM files unless ``templates_tmpfs_dir`` says otherwise (a tmpfs).
DEFAULT_TEMPLATES_TMPFS_DIR = "/dev/shm"
#: How much of that tmpfs the templates of one daemon may fill unless ``templates_tmpfs_budget`` says otherwise.
DEFAULT_TEMPLATES_TMPFS_BUDGET = 2 * GiB
#: The longest ``stats_interval``.
MAX_STATS_INTERVAL = 3600.0
#: Bytes of a node's serial console kept on disk (``console.log`` and ``console.log.1`` together) unless
#: ``console_log_size`` says otherwise; a guest writes its console at ~0.5-0.75 MB/s under TCG here.
DEFAULT_CONSOLE_LOG_SIZE = 4 * MiB
#: The smallest and largest ``console_log_size``.
MIN_CONSOLE_LOG_SIZE = 64 * KiB
MAX_CONSOLE_LOG_SIZE = GiB
#: What a VM is taken to hold beyond its guest RAM unless ``admission.vm_overhead`` says otherwise: QEMU
#: itself and, under TCG, its translation cache (measured: 260-295 MB resident for 128 MiB guests).
DEFAULT_VM_OVERHEAD = 160 * MiB
#: The most cold boots ``admission.boot_concurrency`` may allow at once.
MAX_BOOT_CONCURRENCY = 256
#: MiB of translation cache each TCG VM may fill unless ``tcg_tb_size_mb`` says otherwise: a boot
#: translates ~75 MB of code; 64 keeps ~22 MB per VM off its memory with no measurable slowdown
#: (32 or less thrashes).
DEFAULT_TCG_TB_SIZE_MB = 64

#: The audit log's size at which it is rotated, how many rotated files are
#: kept by default, and at most.
DEFAULT_AUDIT_MAX_SIZE = 10 * MiB
DEFAULT_AUDIT_KEEP = 5
MAX_AUDIT_KEEP = 100
#: The largest ``tcg_tb_size_mb``.
MAX_TCG_TB_SIZE_MB = 4096
#: The most spare VMs ``warm_spare`` may keep per template: each holds a VM of the template's RAM in the
#: admission budget, and as many creates at once as a fork has children (8) is what a pool is for.
MAX_WARM_SPARE = 8
#: Live background execs a node may keep unless ``limits.background_execs_per_node`` says otherwise, and the
#: most it may say (the guest agent's own bound, ``MAX_EXECS`` in vmservice/guest/background.py).
DEFAULT_BACKGROUND_EXECS_PER_NODE = 64
MAX_BACKGROUND_EXECS_PER_NODE = 256
#: The API's connections at once, and from one client, unless ``limits`` says otherwise; the most either may be.
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_MAX_CONNECTIONS_PER_PEER = 256
MAX_CONNECTIONS = 65536
#: Each VM of an isolated network takes a /30 (network, host side, guest,
#: broadcast), so a /22 holds 256 VM slots as the API specification says.
ISOLATED_SLOT_PREFIX = 30

HYPERVISORS = ("qemu",)
ACCELERATORS = ("auto", "kvm", "tcg")
STORAGE_KINDS = ("image",)
NETWORK_MODES = ("isolated", "bridge")
#: How a fork gets a node's memory (``host_groups[].fork_memory``).
FORK_MEMORY_KINDS = ("copy", "file")

#: Group names become hostname prefixes (``<group>-<n>``), so they are kept to
#: a conservative subset of a DNS label: lowercase letters, digits and '-',
#: starting with a letter, not ending with '-', at most 20 characters (which
#: leaves room in the 63-character label for the counter).
_GROUP_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,18}[a-z0-9])?")
_GROUP_NAME_RULE = (
    "expected 1-20 characters: lowercase letters, digits and '-', "
    "starting with a letter and not ending with '-'"
)
#: A DNS name in ``api.allowed_hosts`` (lowercase labels of letters, digits, '-' and '_').
_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*")
#: Linux interface names: at most 15 bytes, no '/', ':' or white space.
_INTERFACE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")

_SIZE = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?:(?P<unit>[KMGTkmgt])(?:i?B)?|B)?")
_SIZE_UNITS = {"k": KiB, "m": MiB, "g": GiB, "t": TiB}
_SIZE_HINT = "expected e.g. 2G, 512M or bytes"


class ConfigError(Exception):
    """
    The configuration cannot be used.

    One problem per error, described on one line so that the daemon can print
    ``str(error)`` and exit, and an operator sees at once which key to fix.

    :ivar path: The key path, e.g. ``config.host_groups[1].storage_size``; for
        problems with the file itself (missing, not YAML) the file name, with
        ``:<line>`` when there is one.
    :ivar message: What is wrong, e.g. ``unknown key``.
    :ivar source: The file (or ``<config>``) the text came from, if known.
    :ivar line: The 1-based line of the offending key in ``source``, if known.
    """

    def __init__(
        self,
        path: str,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
    ) -> None:
        message = " ".join(message.split())
        super().__init__(path, message)
        self.path = path
        self.message = message
        self.source = source
        self.line = line

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    @property
    def location(self) -> str | None:
        """
        ``<source>:<line>`` of the offending key, for editors and log lines;
        ``None`` when the line is unknown.
        """
        if self.source is None or self.line is None:
            return None
        return f"{self.source}:{self.line}"


# --------------------------------------------------------------------------
# Sizes


def parse_size(text: str) -> int:
    """
    Parse a size such as ``2G``, ``512M``, ``1.5G``, ``2GiB`` or ``4096``.

    Units are binary multiples, whatever their spelling: ``K``, ``M``, ``G``
    and ``T`` (either case), optionally followed by ``B`` or ``iB``, so
    ``1G``, ``1GB`` and ``1GiB`` all mean 1073741824 bytes, as in Slicer and
    QEMU. A bare number, or a number followed by ``B``, is bytes. A decimal
    fraction is accepted when it comes to a whole number of bytes (``1.5G``
    is, ``0.1K`` is not).

    :param text: The size as written in the configuration.
    :return: The size in bytes.
    :raises ValueError: With a one-line message quoting ``text``.
    """
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"bad size {text!r} ({_SIZE_HINT})")
    unit: str | None = match.group("unit")
    multiplier = _SIZE_UNITS[unit.lower()] if unit else 1
    number: str = match.group("number")
    whole, _, fraction = number.partition(".")
    numerator = int(whole + fraction) * multiplier
    denominator: int = 10 ** len(fraction)
    if numerator % denominator:
        raise ValueError(f"bad size {text!r} (not a whole number of bytes)")
    return numerator // denominator


def format_size(size: int) -> str:
    """
    Format a byte count the short way this configuration writes it.

    The largest binary unit that divides ``size`` exactly is used (``2G``,
    ``512M``); otherwise the plain number of bytes. :func:`parse_size` reads
    the result back to the same number.

    :param size: A non-negative number of bytes.
    :raises ValueError: If ``size`` is negative.
    """
    if size < 0:
        raise ValueError(f"cannot format negative size {size}")
    if size:
        for suffix, multiplier in (("T", TiB), ("G", GiB), ("M", MiB), ("K", KiB)):
            if size % multiplier == 0:
                return f"{size // multiplier}{suffix}"
    return str(size)


# --------------------------------------------------------------------------
# The public, resolved records


def _remote_without_auth(address: str, auth: AuthConfig) -> bool:
    """Whether ``address`` is a TCP address other than a loopback one while ``auth`` is off."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False  # a UNIX socket: its file mode controls access
    return not ip.is_loopback and not auth.enabled


def _quote_endpoint_argument(argument: str) -> str:
    """
    Quote one endpoint-string argument as
    :func:`twisted.internet.endpoints.quoteStringArgument` does (a backslash
    before each ``\\`` and ``:``), without its untyped signature.
    """
    return argument.replace("\\", "\\\\").replace(":", "\\:")


@attrs.frozen(kw_only=True)
class AuthConfig:
    """
    ``config.api.auth``: whether API callers must present a bearer token.

    :ivar enabled: True to require ``Authorization: Bearer <token>``. Off by
        default, for TCP and UNIX sockets alike: on a UNIX socket the file
        mode controls access, and on TCP the default address is loopback.
    """

    enabled: bool = False
    #: With ``enabled``, whether ``GET /metrics`` may still be read without a
    #: token. Off by default: its series name every node and host group.
    public_metrics: bool = False
    #: The file of valid tokens (one per line, ``TOKEN [LABEL]``), reloaded on
    #: ``SIGHUP`` and when it changes; ``None``: ``<state_dir>/auth/token``,
    #: made with one new token at the first start.
    token_file: str | None = None


@attrs.frozen(kw_only=True)
class ApiConfig:
    """
    ``config.api``: where the HTTP API listens.

    :ivar bind_address: An IPv4 or IPv6 address to listen on with TCP, or a
        path (it contains a ``/``) of a UNIX socket to create with mode 0660.
    :ivar port: The TCP port; 0 picks a free port. Ignored for a UNIX socket.
    :ivar auth: Whether callers must authenticate.
    :ivar allowed_hosts: Host names (lowercase) a request's ``Host`` may
        name besides the bound address (and ``localhost`` on a loopback or
        wildcard address); see :mod:`vmservice.api.gate`.
    :ivar allowed_origins: Browser origins (``scheme://host[:port]``, as
        browsers write them) whose requests may change state.
    :ivar allow_unauthenticated_remote: Whether the daemon may listen on a
        TCP address that is not a loopback one with authentication off.
    """

    bind_address: str = "127.0.0.1"
    port: int = 8080
    auth: AuthConfig = AuthConfig()
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    allow_unauthenticated_remote: bool = False

    @property
    def unix_socket_path(self) -> str | None:
        """
        The UNIX socket path when ``bind_address`` is not an IP address, else
        ``None`` (listen on TCP).
        """
        try:
            ipaddress.ip_address(self.bind_address)
        except ValueError:
            return self.bind_address
        return None

    def endpoint_description(self) -> str:
        """
        A server endpoint string for :func:`twisted.internet.endpoints.serverFromString`.

        Building it here keeps the quoting of ``:`` (IPv6 addresses, odd
        socket paths) in one tested place: ``tcp:port=8080:interface=127.0.0.1``,
        ``tcp6:port=8080:interface=\\:\\:1`` or ``unix:address=/run/x.sock:mode=660``.
        """
        path = self.unix_socket_path
        if path is not None:
            return f"unix:address={_quote_endpoint_argument(path)}:mode=660"
        address = ipaddress.ip_address(self.bind_address)
        kind = "tcp6" if address.version == 6 else "tcp"
        return f"{kind}:port={self.port}:interface={_quote_endpoint_argument(self.bind_address)}"


@attrs.frozen(kw_only=True)
class NetworkConfig:
    """
    ``host_groups[].network``: how a group's VMs are networked.

    Parsed and checked now; the network code applies it.

    :ivar mode: ``isolated`` (a network namespace per VM, reachable only as
        ``allow``/``drop`` say) or ``bridge`` (VMs join an existing bridge).
    :ivar range: The addresses handed to VMs. Required for ``isolated``, where
        each VM takes a /30, so a /22 gives 256 slots.
    :ivar allow: Destinations an isolated VM may reach (``isolated`` only).
    :ivar drop: Destinations an isolated VM must not reach (``isolated`` only).
    :ivar bridge: The Linux bridge to attach to (``bridge`` only, required).
    :ivar gateway: The gateway address with its prefix length, e.g.
        ``192.168.137.1/24`` (``bridge`` only, required): the bridge's
        address and the VMs' default route.
    """

    mode: str
    range: IPv4Network | None = None
    allow: tuple[IPv4Network, ...] = ()
    drop: tuple[IPv4Network, ...] = ()
    bridge: str | None = None
    gateway: IPv4Interface | None = None


@attrs.frozen(kw_only=True)
class HostGroupConfig:
    """
    One entry of ``config.host_groups``: the template of a group's nodes.

    All inheritance is resolved: ``image``, ``hypervisor`` and
    ``graceful_shutdown`` hold the group's own value or the top-level one.

    :ivar name: The group name, also the hostname prefix (``<name>-<n>``).
    :ivar count: How many nodes the daemon keeps running; 0 means nodes are
        only created through the API.
    :ivar vcpu: Virtual CPUs per node (at least 1).
    :ivar ram_bytes: Guest memory in bytes, a whole number of MiB.
    :ivar storage: How disks are made; only ``image`` (a copy of the image's
        root file system grown to ``storage_size``) for now.
    :ivar storage_size: Disk size of each node in bytes.
    :ivar image: The guest image name.
    :ivar hypervisor: The hypervisor driver; only ``qemu`` for now.
    :ivar graceful_shutdown: Ask the guest to shut down (rather than killing
        it) when a node is stopped.
    :ivar persistent: Keep a node's disk across relaunches and daemon restarts.
    :ivar network: The network section, or ``None`` when absent.
    :ivar userdata: A shell script run at the first boot of each node of the
        group, before the node's own userdata (both in one script).
    :ivar gpus: The host's GPUs (full PCI addresses) that ``gpu_count``
        hands out to the group's nodes, in this order.
    :ivar warm: Start the group's nodes as clones of a template booted once
        (see ``docs/warm-start.md``) instead of booting each.
    :ivar warm_spare: How many spare VMs of a warm group's template to keep
        started and waiting (0 to :data:`MAX_WARM_SPARE`; the file's ``true``
        is 1, ``false`` 0), so as many creates at once only load and adopt
        (``docs/warm-start.md``).
    :ivar max_nodes: The most nodes the group may have at once (whatever
        their status); ``None`` for no limit.
    :ivar idle_suspend: Seconds a node may go without API activity before it
        is suspended to disk automatically (and woken by the next request
        that needs its guest); ``None``: never (see ``docs/lifecycle.md``).
    :ivar fork_memory: How a fork gets a node's memory: ``copy`` (its
        memory is QEMU's own; each child loads the whole saved state) or
        ``file`` (its memory is a file in ``templates_tmpfs_dir`` from its
        start; a fork saves only the device state and copies that file once,
        see ``docs/warm-start.md``).  ``file`` excludes ``warm``.
    :ivar guest_aslr: Whether the guests' kernels randomize their processes'
        address spaces (the kernel's default); false boots them with
        ``norandmaps`` (see ``docs/configuration.md``, ``docs/performance.md``).
    """

    name: str
    count: int = 0
    vcpu: int = 1
    ram_bytes: int = DEFAULT_RAM_BYTES
    storage: str = "image"
    storage_size: int = DEFAULT_STORAGE_SIZE
    image: str = "default"
    hypervisor: str = "qemu"
    graceful_shutdown: bool = True
    persistent: bool = False
    network: NetworkConfig | None = None
    userdata: str = ""
    gpus: tuple[str, ...] = ()
    warm: bool = False
    max_nodes: int | None = None
    idle_suspend: float | None = None
    warm_spare: int = 1
    fork_memory: str = "copy"
    guest_aslr: bool = True

    @property
    def arch(self) -> str:
        """
        The guest architecture reported by the API; only ``x86_64`` guests are
        built and booted for now.
        """
        return "x86_64"


@attrs.frozen(kw_only=True)
class AuditConfig:
    """
    The ``audit:`` section: the log of state-changing requests (see
    :mod:`vmservice.audit`).

    :ivar enabled: Whether the log is written.
    :ivar path: The log file; ``None``: ``<state_dir>/audit/audit.log``.
    :ivar max_size: Bytes at which the file is rotated.
    :ivar keep: How many rotated files are kept.
    """

    enabled: bool = True
    path: str | None = None
    max_size: int = DEFAULT_AUDIT_MAX_SIZE
    keep: int = DEFAULT_AUDIT_KEEP


@attrs.frozen(kw_only=True)
class AdmissionConfig:
    """
    The ``admission:`` section: what the host may be asked to hold (see
    :mod:`vmservice.nodes.admission`).

    :ivar memory_budget: Bytes that the VMs of this daemon may hold at once
        (each counts its guest RAM plus :attr:`vm_overhead`); ``None``: from
        the host's RAM at start.
    :ivar vm_overhead: Bytes a VM is taken to hold beyond its guest RAM.
    :ivar boot_concurrency: Cold boots at once (others wait in order); 0 for
        no bound; ``None``: twice the host's CPU count.
    """

    memory_budget: int | None = None
    vm_overhead: int = DEFAULT_VM_OVERHEAD
    boot_concurrency: int | None = None


@attrs.frozen(kw_only=True)
class LimitsConfig:
    """
    The ``limits:`` section: what clients and guests may make the daemon hold
    (see docs/security.md).

    :ivar buffer_budget: Bytes all buffered results (buffered execs' output
        and answers, large agent replies) may hold at once
        (:mod:`vmservice.buffer_budget`); ``None``: from the host's RAM at start.
    :ivar background_execs_per_node: Live background execs (running, or ended
        and not deleted) a node may keep (:mod:`vmservice.nodes.background_limit`).
    :ivar max_connections: The API's connections open at once
        (:mod:`vmservice.api.connection_limits`).
    :ivar max_connections_per_peer: The API's connections open at once from one
        client address (an IPv6 /64); a UNIX socket's clients count in the total only.
    """

    buffer_budget: int | None = None
    background_execs_per_node: int = DEFAULT_BACKGROUND_EXECS_PER_NODE
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER


@attrs.frozen(kw_only=True)
class Config:
    """
    The whole, resolved ``config:`` section.

    :ivar api: The API listener.
    :ivar state_dir: Where node records and runtime files are kept.
    :ivar image_dir: Where built guest images are found.
    :ivar image: The default image name of groups.
    :ivar hypervisor: The default hypervisor of groups.
    :ivar graceful_shutdown: The default of groups' ``graceful_shutdown``.
    :ivar accel: ``auto`` (probe KVM, fall back to TCG), ``kvm`` or ``tcg``.
    :ivar host_groups: The host groups, in file order, names unique.
    :ivar codehost_url: The code-hosting site ``codehost_user`` fetches SSH
        keys from (``{url}/{user}.keys``), without a final ``/``; ``None``
        when disabled.
    :ivar codehost_timeout: Seconds one such fetch may take.
    :ivar stats_interval: Seconds between two samplings of every node's
        statistics for the per-node series of ``/metrics``; 0 for none.
    :ivar templates_tmpfs_dir: The tmpfs directory under which this daemon
        keeps its templates' RAM files (in a directory of its own).
    :ivar tcg_tb_size_mb: MiB of translation cache of each VM under TCG
        (``-accel tcg,tb-size=N``), 0 for QEMU's own default.
    :ivar templates_tmpfs_budget: Bytes of RAM files this daemon's templates
        may hold at once; a template that would exceed it is not built.
    :ivar admission: The memory budget and the bound on cold boots.
    :ivar limits: The bounds on what clients and guests make the daemon hold.
    :ivar console_log_size: Bytes of each node's serial console kept on disk
        (the log and its rotated older part together; see
        :mod:`vmservice.nodes.console_rotation`), and the most a logs request reads.
    :ivar audit: The audit log of state-changing requests.
    """

    api: ApiConfig = ApiConfig()
    state_dir: str = DEFAULT_STATE_DIR
    image_dir: str = DEFAULT_IMAGE_DIR
    image: str = "default"
    hypervisor: str = "qemu"
    graceful_shutdown: bool = True
    accel: str = "auto"
    host_groups: tuple[HostGroupConfig, ...] = ()
    codehost_url: str | None = DEFAULT_CODEHOST_URL
    codehost_timeout: float = DEFAULT_CODEHOST_TIMEOUT
    stats_interval: float = DEFAULT_STATS_INTERVAL
    templates_tmpfs_dir: str = DEFAULT_TEMPLATES_TMPFS_DIR
    templates_tmpfs_budget: int = DEFAULT_TEMPLATES_TMPFS_BUDGET
    admission: AdmissionConfig = AdmissionConfig()
    tcg_tb_size_mb: int = DEFAULT_TCG_TB_SIZE_MB
    limits: LimitsConfig = LimitsConfig()
    console_log_size: int = DEFAULT_CONSOLE_LOG_SIZE
    audit: AuditConfig = AuditConfig()

    def group(self, name: str) -> HostGroupConfig | None:
        """
        The host group called ``name``, or ``None``; the API answers 404 for
        an unknown group, so absence is an ordinary answer here.
        """
        for group in self.host_groups:
            if group.name == name:
                return group
        return None


# --------------------------------------------------------------------------
# The file's shape, as cattrs structures it (step 1)

#: A byte count written as an integer or a size string (see :func:`parse_size`).
_Size = NewType("_Size", int)

#: ``warm_spare``: a boolean (``true`` is 1, ``false`` 0) or a count from 0 to :data:`MAX_WARM_SPARE`.
_SpareCount = NewType("_SpareCount", int)

#: A PCI address as written; YAML 1.1 reads an unquoted ``01:00.0`` as a
#: base-60 number, so the message says to quote it.
_PciText = NewType("_PciText", str)

# The ``_*Document`` classes mirror the file key for key. ``None`` means "not
# given" where the meaning of absence is decided later (inheritance, the
# environment, "exactly one of"); everything else has its default here.


@attrs.frozen
class _AuthDocument:
    enabled: bool = False
    public_metrics: bool = False
    token_file: str | None = None


@attrs.frozen
class _ApiDocument:
    bind_address: str = "127.0.0.1"
    port: int = 8080
    auth: _AuthDocument = _AuthDocument()
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    allow_unauthenticated_remote: bool = False


@attrs.frozen
class _NetworkDocument:
    mode: str
    range: IPv4Network | None = None
    allow: tuple[IPv4Network, ...] = ()
    drop: tuple[IPv4Network, ...] = ()
    bridge: str | None = None
    gateway: IPv4Interface | None = None


@attrs.frozen
class _GroupDocument:
    name: str
    count: int = 0
    vcpu: int = 1
    ram_gb: int | None = None
    ram_mb: int | None = None
    ram_bytes: int | None = None
    storage: str = "image"
    storage_size: _Size = _Size(DEFAULT_STORAGE_SIZE)
    image: str | None = None
    hypervisor: str | None = None
    graceful_shutdown: bool | None = None
    persistent: bool = False
    network: _NetworkDocument | None = None
    userdata: str = ""
    gpus: tuple[_PciText, ...] = ()
    warm: bool = False
    max_nodes: int | None = None
    idle_suspend: str | None = None
    warm_spare: _SpareCount = _SpareCount(1)
    fork_memory: str = "copy"
    guest_aslr: bool = True


@attrs.frozen
class _AuditDocument:
    enabled: bool = True
    path: str | None = None
    max_size: _Size = _Size(DEFAULT_AUDIT_MAX_SIZE)
    keep: int = DEFAULT_AUDIT_KEEP


@attrs.frozen
class _AdmissionDocument:
    memory_budget: _Size | None = None
    vm_overhead: _Size = _Size(DEFAULT_VM_OVERHEAD)
    boot_concurrency: int | None = None


@attrs.frozen
class _LimitsDocument:
    buffer_budget: _Size | None = None
    background_execs_per_node: int = DEFAULT_BACKGROUND_EXECS_PER_NODE
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER


@attrs.frozen
class _ConfigDocument:
    api: _ApiDocument = _ApiDocument()
    state_dir: str = DEFAULT_STATE_DIR
    image_dir: str | None = None
    image: str = "default"
    hypervisor: str = "qemu"
    graceful_shutdown: bool = True
    accel: str = "auto"
    host_groups: tuple[_GroupDocument, ...] = ()
    codehost_url: str | None = DEFAULT_CODEHOST_URL
    codehost_timeout: float = DEFAULT_CODEHOST_TIMEOUT
    stats_interval: float = DEFAULT_STATS_INTERVAL
    templates_tmpfs_dir: str = DEFAULT_TEMPLATES_TMPFS_DIR
    templates_tmpfs_budget: _Size = _Size(DEFAULT_TEMPLATES_TMPFS_BUDGET)
    admission: _AdmissionDocument = _AdmissionDocument()
    tcg_tb_size_mb: int = DEFAULT_TCG_TB_SIZE_MB
    limits: _LimitsDocument = _LimitsDocument()
    console_log_size: _Size = _Size(DEFAULT_CONSOLE_LOG_SIZE)
    audit: _AuditDocument = _AuditDocument()


def _structure_size(value: object, _type: object) -> _Size:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise BadValue(f"bad size {value} (must not be negative)")
        return _Size(value)
    if isinstance(value, str):
        try:
            return _Size(parse_size(value))
        except ValueError as error:
            raise BadValue(str(error)) from None
    raise BadValue(f"expected a size ({_SIZE_HINT}), got {describe(value)}")


def _structure_spare_count(value: object, _type: object) -> _SpareCount:
    if isinstance(value, bool):
        return _SpareCount(int(value))
    if isinstance(value, int):
        if not 0 <= value <= MAX_WARM_SPARE:
            raise BadValue(f"warm_spare {value} must be from 0 to {MAX_WARM_SPARE} (or true, false)")
        return _SpareCount(value)
    raise BadValue(f"expected a boolean or a count of spare VMs (0 to {MAX_WARM_SPARE}), got {describe(value)}")


def _structure_pci_text(value: object, _type: object) -> _PciText:
    if not isinstance(value, str):
        raise BadValue(f"expected a PCI address in quotes, e.g. \"0000:01:00.0\" (YAML reads one without quotes "
                       f"as a number), got {describe(value)}")
    return _PciText(value)


def _cidr_text(value: object) -> str:
    if not isinstance(value, str):
        raise BadValue(f"expected a CIDR such as 10.0.0.0/8, got {describe(value)}")
    if "/" not in value:
        raise BadValue(f"bad CIDR {value!r} (missing prefix length, e.g. {value}/32)")
    return value


def _ipv4_interface(value: object, what: str, example: str) -> IPv4Interface:
    """An IPv4 address with a prefix length (``10.0.0.0/8``); ``what`` names it in errors."""
    text = _cidr_text(value)
    try:
        interface = ipaddress.ip_interface(text)
    except ValueError:
        raise BadValue(f"bad {what} {text!r} (expected e.g. {example})") from None
    if interface.version != 4:
        raise BadValue(f"bad {what} {text!r} (only IPv4 is supported)")
    return IPv4Interface(interface)


def _structure_network(value: object, _type: object) -> IPv4Network:
    interface = _ipv4_interface(value, "CIDR", "10.0.0.0/8")
    if interface.ip != interface.network.network_address:
        raise BadValue(f"bad CIDR {str(interface)!r} (host bits set; did you mean {interface.network}?)")
    return interface.network


def _structure_interface(value: object, _type: object) -> IPv4Interface:
    interface = _ipv4_interface(value, "address", "192.168.137.1/24")
    network = interface.network
    if network.prefixlen < 31 and interface.ip in (network.network_address, network.broadcast_address):
        raise BadValue(f"bad address {str(interface)!r} (not a host address of {network})")
    return interface


def _make_converter() -> cattrs.Converter:
    """
    The strict converter with the configuration's own value types (sizes,
    CIDRs, addresses) registered before its first use.
    """
    converter = strict_converter()
    converter.register_structure_hook(_Size, _structure_size)
    converter.register_structure_hook(_PciText, _structure_pci_text)
    converter.register_structure_hook(_SpareCount, _structure_spare_count)
    converter.register_structure_hook(IPv4Network, _structure_network)
    converter.register_structure_hook(IPv4Interface, _structure_interface)
    return converter


_CONVERTER = _make_converter()

# --------------------------------------------------------------------------
# Reading the YAML


def _compose(text: str, source: str) -> tuple[yaml.Node | None, object]:
    """
    Parse YAML into both its node tree (for line numbers) and its data.

    :raises ConfigError: On a syntax error, naming ``source`` and the line.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else None
        what = error.problem or "unreadable"
        if error.context:
            what += f" ({error.context})"
        raise ConfigError(
            f"{source}:{line}" if line is not None else source,
            f"YAML syntax error: {what}",
            source=source,
            line=line,
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(source, f"YAML error: {error}", source=source) from None
    finally:
        loader.dispose()
    return node, data


def _find_duplicate_key(node: yaml.Node | None, parts: Path) -> tuple[Path, yaml.Node] | None:
    """
    The first key that occurs twice in one mapping: PyYAML silently keeps the
    last, which hides a typo'd edit, so we refuse it.
    """
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
                continue
            if key.value in seen:
                return (*parts, key.value), key
            seen.add(key.value)
            found = _find_duplicate_key(value, (*parts, key.value))
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found = _find_duplicate_key(item, (*parts, index))
            if found is not None:
                return found
    return None


def _line_of(node: yaml.Node | None, parts: Path) -> int | None:
    """
    The 1-based line of the key at ``parts``, or of the deepest enclosing
    value that exists (a missing key is reported where its mapping starts).
    """
    if node is None:
        return None
    mark = node.start_mark
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    mark, node = key.start_mark, value
                    break
            else:
                break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            mark = node.start_mark
        else:
            break
    return mark.line + 1


# --------------------------------------------------------------------------
# Checking and resolving (step 2)


@attrs.define
class _Resolver:
    """
    Turns checked documents into public records, raising :class:`ConfigError`
    with the line of the key at fault.

    :ivar source: The file name, for :attr:`ConfigError.source`.
    :ivar root: The YAML node tree, for line numbers.
    :ivar environ: The environment, for the ``image_dir`` default.
    """

    source: str
    root: yaml.Node | None
    environ: Mapping[str, str]

    def error(self, parts: Path, message: str) -> ConfigError:
        return ConfigError(format_path(parts), message, source=self.source, line=_line_of(self.root, parts))

    def nonempty(self, value: str, parts: Path) -> str:
        if not value.strip():
            raise self.error(parts, "must not be empty")
        return value

    def one_of(self, value: str, allowed: tuple[str, ...], what: str, parts: Path) -> str:
        if value not in allowed:
            raise self.error(parts, f"unknown {what} {value!r} (expected one of: {', '.join(allowed)})")
        return value

    def config(self, document: _ConfigDocument) -> Config:
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
        return Config(
            api=api,
            state_dir=state_dir,
            image_dir=image_dir,
            image=image,
            hypervisor=hypervisor,
            graceful_shutdown=document.graceful_shutdown,
            accel=accel,
            host_groups=tuple(groups),
            codehost_url=self.codehost_url(document.codehost_url, (*base, "codehost_url")),
            codehost_timeout=self.codehost_timeout(document.codehost_timeout, (*base, "codehost_timeout")),
            stats_interval=self.stats_interval(document.stats_interval, (*base, "stats_interval")),
            templates_tmpfs_dir=self.nonempty(document.templates_tmpfs_dir, (*base, "templates_tmpfs_dir")),
            templates_tmpfs_budget=document.templates_tmpfs_budget,
            admission=self.admission(document.admission, (*base, "admission")),
            tcg_tb_size_mb=self.tcg_tb_size_mb(document.tcg_tb_size_mb, (*base, "tcg_tb_size_mb")),
            limits=self.limits(document.limits, (*base, "limits")),
            console_log_size=self.console_log_size(document.console_log_size, (*base, "console_log_size")),
            audit=self.audit(document.audit, (*base, "audit")),
        )

    def limits(self, document: _LimitsDocument, parts: Path) -> LimitsConfig:
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
        return LimitsConfig(buffer_budget=document.buffer_budget, background_execs_per_node=execs,
                            max_connections=most, max_connections_per_peer=per_peer)

    def audit(self, document: _AuditDocument, parts: Path) -> AuditConfig:
        if document.path is not None and not os.path.isabs(document.path):
            raise self.error((*parts, "path"), f"path {document.path!r} must be an absolute path")
        if document.max_size < 64 * 1024:
            raise self.error((*parts, "max_size"), f"max_size {document.max_size} must be at least 64K")
        if not 0 <= document.keep <= MAX_AUDIT_KEEP:
            raise self.error((*parts, "keep"), f"keep {document.keep} must be from 0 to {MAX_AUDIT_KEEP}")
        return AuditConfig(enabled=document.enabled, path=document.path, max_size=document.max_size,
                           keep=document.keep)

    def admission(self, document: _AdmissionDocument, parts: Path) -> AdmissionConfig:
        if document.memory_budget is not None and document.memory_budget < MiB:
            raise self.error((*parts, "memory_budget"), f"memory_budget {document.memory_budget} must be at least 1M")
        concurrency = document.boot_concurrency
        if concurrency is not None and not 0 <= concurrency <= MAX_BOOT_CONCURRENCY:
            raise self.error((*parts, "boot_concurrency"), f"boot_concurrency {concurrency} must be from 0 (no bound) "
                                                           f"to {MAX_BOOT_CONCURRENCY}")
        return AdmissionConfig(memory_budget=document.memory_budget, vm_overhead=document.vm_overhead,
                               boot_concurrency=concurrency)

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
        if not 0 < seconds <= MAX_CODEHOST_TIMEOUT:
            raise self.error(parts, f"codehost_timeout {seconds:g} must be more than 0 and at most "
                                    f"{MAX_CODEHOST_TIMEOUT:g} seconds")
        return seconds

    def tcg_tb_size_mb(self, size: int, parts: Path) -> int:
        if not 0 <= size <= MAX_TCG_TB_SIZE_MB:
            raise self.error(parts, f"tcg_tb_size_mb {size} must be 0 (QEMU's default) or from 1 to "
                                    f"{MAX_TCG_TB_SIZE_MB} MiB")
        return size

    def console_log_size(self, size: int, parts: Path) -> int:
        if not MIN_CONSOLE_LOG_SIZE <= size <= MAX_CONSOLE_LOG_SIZE:
            raise self.error(parts, f"console_log_size {format_size(size)} must be from "
                                    f"{format_size(MIN_CONSOLE_LOG_SIZE)} to {format_size(MAX_CONSOLE_LOG_SIZE)}")
        return size

    def stats_interval(self, seconds: float, parts: Path) -> float:
        if seconds != 0 and not 1 <= seconds <= MAX_STATS_INTERVAL:
            raise self.error(parts, f"stats_interval {seconds:g} must be 0 (off) or from 1 to "
                                    f"{MAX_STATS_INTERVAL:g} seconds")
        return seconds

    def api(self, document: _ApiDocument, parts: Path) -> ApiConfig:
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
        auth = AuthConfig(enabled=document.auth.enabled, public_metrics=document.auth.public_metrics,
                          token_file=token_file)
        if _remote_without_auth(address, auth) and not document.allow_unauthenticated_remote:
            raise self.error(
                (*parts, "bind_address"),
                f"{address} is not a loopback address and auth is off: anyone who reaches it could drive "
                "the daemon; turn api.auth.enabled on, or set api.allow_unauthenticated_remote: true",
            )
        return ApiConfig(
            bind_address=address, port=document.port, auth=auth, allowed_hosts=hosts, allowed_origins=origins,
            allow_unauthenticated_remote=document.allow_unauthenticated_remote,
        )

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

    def group(self, document: _GroupDocument, parts: Path, top: _ConfigDocument) -> HostGroupConfig:
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
        return HostGroupConfig(
            name=document.name,
            count=document.count,
            vcpu=document.vcpu,
            ram_bytes=ram_bytes,
            storage=storage,
            storage_size=document.storage_size,
            image=image,
            hypervisor=hypervisor,
            graceful_shutdown=graceful,
            persistent=document.persistent,
            network=network,
            userdata=self.userdata(document.userdata, (*parts, "userdata")),
            gpus=self.gpus(document.gpus, (*parts, "gpus")),
            warm=document.warm,
            max_nodes=document.max_nodes,
            idle_suspend=self.idle_suspend(document.idle_suspend, (*parts, "idle_suspend")),
            warm_spare=document.warm_spare,
            fork_memory=self.fork_memory(document, (*parts, "fork_memory")),
            guest_aslr=document.guest_aslr,
        )

    def fork_memory(self, document: _GroupDocument, parts: Path) -> str:
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

    def gpus(self, addresses: tuple[_PciText, ...], parts: Path) -> tuple[str, ...]:
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
        size = len(text.encode("utf-8"))
        if size > MAX_USERDATA:
            raise self.error(parts, f"userdata is {size} bytes; at most {MAX_USERDATA} bytes are allowed")
        return text

    def ram(self, document: _GroupDocument, parts: Path) -> int:
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

    def network(self, document: _NetworkDocument, parts: Path) -> NetworkConfig:
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
        return NetworkConfig(
            mode=mode,
            range=document.range,
            allow=document.allow,
            drop=document.drop,
            bridge=document.bridge,
            gateway=document.gateway,
        )

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


# --------------------------------------------------------------------------
# Entry points


def parse_config(text: str, source: str = "<config>", environ: Mapping[str, str] | None = None) -> Config:
    """
    Parse and check configuration text.

    :param text: The YAML text, with a ``config:`` root.
    :param source: Where the text came from, for error locations.
    :param environ: The environment to read ``VMSERVICE_IMAGE_DIR`` from;
        ``os.environ`` when ``None`` (tests pass their own).
    :return: The fully resolved configuration.
    :raises ConfigError: On the first problem, in file order.
    """
    node, data = _compose(text, source)
    duplicate = _find_duplicate_key(node, ())
    if duplicate is not None:
        parts, key_node = duplicate
        raise ConfigError(
            format_path(parts), "duplicate key", source=source, line=key_node.start_mark.line + 1
        )
    resolver = _Resolver(source=source, root=node, environ=os.environ if environ is None else environ)
    if not isinstance(data, dict) or "config" not in data:
        raise resolver.error(
            ("config",), "missing root key (the file must have a top-level 'config:' mapping)"
        )
    extra = [key for key in data if key != "config"]
    if extra:
        raise resolver.error((str(extra[0]),), "unknown key (everything belongs under 'config:')")
    try:
        document = _CONVERTER.structure(data["config"], _ConfigDocument)
    except Exception as error:
        problems = list(structure_errors(error, ("config",)))
        if not problems:  # pragma: no cover - cattrs always says something
            raise resolver.error(("config",), f"invalid value ({error})") from None
        located = [
            (_line_of(node, parts) or 1 << 30, order, parts, message)
            for order, (parts, message) in enumerate(problems)
        ]
        _, _, parts, message = min(located)
        raise resolver.error(parts, message) from None
    return resolver.config(document)


def load_config(path: str, environ: Mapping[str, str] | None = None) -> Config:
    """
    Read, parse and check the configuration file at ``path``.

    :param path: The YAML file.
    :param environ: As for :func:`parse_config`.
    :raises ConfigError: If the file cannot be read or is not valid; a file
        problem names the file, a value problem the key path.
    """
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except OSError as error:
        raise ConfigError(path, f"cannot read: {error.strerror or error}", source=path) from None
    except UnicodeDecodeError as error:
        raise ConfigError(path, f"cannot read: not UTF-8 ({error.reason})", source=path) from None
    return parse_config(text, source=path, environ=environ)
