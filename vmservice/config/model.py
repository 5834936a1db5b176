# -*- test-case-name: tests.config.test_model -*-
"""
The configuration as frozen attrs records: :class:`Config` (the whole,
resolved ``config:`` section) and its parts.

The sections the file writes as the records hold them (``api``, ``auth``,
a group's ``network``, ``audit``, ``admission``, ``limits``) are read
straight into these records, so each of their keys is declared once, here;
a field's type says how the file writes it (:data:`~vmservice.config.values.Size`
is an ``int`` written as ``2G`` or bytes).  :class:`HostGroupConfig` and
:class:`Config` are what the file means once resolved (inherited keys
filled in, RAM in bytes, durations in seconds); the keys the file writes as
they hold them are declared once too, in :class:`GroupKeys` and
:class:`RootKeys`, which the file's documents
(:mod:`vmservice.config.document`) share, adding only the keys the file
writes otherwise.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Interface, IPv4Network

import attrs

from .defaults import (
    DEFAULT_AUDIT_KEEP,
    DEFAULT_AUDIT_MAX_SIZE,
    DEFAULT_BACKGROUND_EXECS_PER_NODE,
    DEFAULT_CODEHOST_TIMEOUT,
    DEFAULT_CODEHOST_URL,
    DEFAULT_CONSOLE_LOG_SIZE,
    DEFAULT_IMAGE_DIR,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_PEER,
    DEFAULT_RAM_BYTES,
    DEFAULT_STATE_DIR,
    DEFAULT_STATS_INTERVAL,
    DEFAULT_STORAGE_SIZE,
    DEFAULT_TCG_TB_SIZE_MB,
    DEFAULT_TEMPLATES_TMPFS_BUDGET,
    DEFAULT_TEMPLATES_TMPFS_DIR,
    DEFAULT_VM_OVERHEAD,
)
from .e2b import E2bConfig
from .kubernetes import KubernetesConfig
from .values import PciText, Size, SpareCount, TunnelPortCount


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
class GroupKeys:
    """
    The keys of an entry of ``config.host_groups`` that the file writes as
    :class:`HostGroupConfig` holds them, declared once for the record and for
    the file's document (:class:`~vmservice.config.document.GroupDocument`).

    :ivar name: The group name, also the hostname prefix (``<name>-<n>``).
    :ivar count: How many nodes the daemon keeps running; 0 means nodes are
        only created through the API.
    :ivar vcpu: Virtual CPUs per node (at least 1).
    :ivar storage: How disks are made; only ``image`` (a copy of the image's
        root file system grown to ``storage_size``) for now.
    :ivar storage_size: Disk size of each node in bytes.
    :ivar persistent: Keep a node's disk across relaunches and daemon restarts.
    :ivar network: The network section, or ``None`` when absent.
    :ivar userdata: A shell script run at the first boot of each node of the
        group, before the node's own userdata (both in one script).
    :ivar gpus: The host's GPUs (full PCI addresses) that ``gpu_count``
        hands out to the group's nodes, in this order.
    :ivar warm: Start the group's nodes as clones of a template booted once
        (see ``docs/warm-start.md``) instead of booting each.
    :ivar max_nodes: The most nodes the group may have at once (whatever
        their status); ``None`` for no limit.
    :ivar warm_spare: How many spare VMs of a warm group's template to keep
        started and waiting (0 to :data:`MAX_WARM_SPARE`; the file's ``true``
        is 1, ``false`` 0), so as many creates at once only load and adopt
        (``docs/warm-start.md``).
    :ivar fork_memory: How a fork gets a node's memory: ``copy`` (its
        memory is QEMU's own; each child loads the whole saved state) or
        ``file`` (its memory is a file in ``templates_tmpfs_dir`` from its
        start; a fork saves only the device state and copies that file once,
        see ``docs/warm-start.md``).  ``file`` excludes ``warm``.
    :ivar guest_aslr: Whether the guests' kernels randomize their processes'
        address spaces (the kernel's default); false boots them with
        ``norandmaps`` (see ``docs/configuration.md``, ``docs/performance.md``).
    :ivar tunnel_ports: How many tunnel ports (raw virtio-serial ports that
        carry one tunnel's bytes each, ``docs/agent-protocol.md``) the
        group's VMs have; 0: none, every tunnel takes the agent channel.
    """

    name: str
    count: int = 0
    vcpu: int = 1
    storage: str = "image"
    storage_size: Size = DEFAULT_STORAGE_SIZE
    persistent: bool = False
    network: NetworkConfig | None = None
    userdata: str = ""
    gpus: tuple[PciText, ...] = ()
    warm: bool = False
    max_nodes: int | None = None
    warm_spare: SpareCount = 1
    fork_memory: str = "copy"
    guest_aslr: bool = True
    tunnel_ports: TunnelPortCount = 4


@attrs.frozen(kw_only=True)
class HostGroupConfig(GroupKeys):
    """
    One entry of ``config.host_groups``: the template of a group's nodes
    (its keys as the file writes them: :class:`GroupKeys`).

    All inheritance is resolved: ``image``, ``hypervisor``,
    ``graceful_shutdown`` and ``agent_transport`` hold the group's own value or the top-level one.

    :ivar ram_bytes: Guest memory in bytes, a whole number of MiB.
    :ivar image: The guest image name.
    :ivar hypervisor: The hypervisor driver; only ``qemu`` for now.
    :ivar graceful_shutdown: Ask the guest to shut down (rather than killing
        it) when a node is stopped.
    :ivar idle_suspend: Seconds a node may go without API activity before it
        is suspended to disk automatically (and woken by the next request
        that needs its guest); ``None``: never (see ``docs/lifecycle.md``).
    :ivar agent_transport: How the daemon reaches the group's agents:
        ``auto`` (AF_VSOCK where the host can, else virtio-serial), ``vsock`` or
        ``virtio-serial`` (see ``docs/vsock.md``).
    """

    ram_bytes: int = DEFAULT_RAM_BYTES
    image: str = "default"
    hypervisor: str = "qemu"
    graceful_shutdown: bool = True
    idle_suspend: float | None = None
    agent_transport: str = "auto"

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
    max_size: Size = DEFAULT_AUDIT_MAX_SIZE
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

    memory_budget: Size | None = None
    vm_overhead: Size = DEFAULT_VM_OVERHEAD
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

    buffer_budget: Size | None = None
    background_execs_per_node: int = DEFAULT_BACKGROUND_EXECS_PER_NODE
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER


@attrs.frozen(kw_only=True)
class RootKeys:
    """
    The keys of the ``config:`` section that the file writes as
    :class:`Config` holds them, declared once for the record and for the
    file's document (:class:`~vmservice.config.document.ConfigDocument`).

    :ivar api: The API listener.
    :ivar state_dir: Where node records and runtime files are kept.
    :ivar image: The default image name of groups.
    :ivar hypervisor: The default hypervisor of groups.
    :ivar agent_transport: The default ``agent_transport`` of groups.
    :ivar graceful_shutdown: The default of groups' ``graceful_shutdown``.
    :ivar accel: ``auto`` (probe KVM, fall back to TCG), ``kvm`` or ``tcg``.
    :ivar codehost_url: The code-hosting site ``codehost_user`` fetches SSH
        keys from (``{url}/{user}.keys``), without a final ``/``; ``None``
        when disabled.
    :ivar codehost_timeout: Seconds one such fetch may take.
    :ivar stats_interval: Seconds between two samplings of every node's
        statistics for the per-node series of ``/metrics``; 0 for none.
    :ivar templates_tmpfs_dir: The tmpfs directory under which this daemon
        keeps its templates' RAM files (in a directory of its own).
    :ivar templates_tmpfs_budget: Bytes of RAM files this daemon's templates
        may hold at once; a template that would exceed it is not built.
    :ivar admission: The memory budget and the bound on cold boots.
    :ivar tcg_tb_size_mb: MiB of translation cache of each VM under TCG
        (``-accel tcg,tb-size=N``), 0 for QEMU's own default.
    :ivar limits: The bounds on what clients and guests make the daemon hold.
    :ivar console_log_size: Bytes of each node's serial console kept on disk
        (the log and its rotated older part together; see
        :mod:`vmservice.nodes.console_rotation`), and the most a logs request reads.
    :ivar audit: The audit log of state-changing requests.
    """

    api: ApiConfig = ApiConfig()
    state_dir: str = DEFAULT_STATE_DIR
    image: str = "default"
    hypervisor: str = "qemu"
    agent_transport: str = "auto"
    graceful_shutdown: bool = True
    accel: str = "auto"
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


@attrs.frozen(kw_only=True)
class Config(RootKeys):
    """
    The whole, resolved ``config:`` section (its keys as the file writes
    them: :class:`RootKeys`).

    :ivar image_dir: Where built guest images are found.
    :ivar host_groups: The host groups, in file order, names unique.
    :ivar kubernetes: The daemon as a node of a Kubernetes cluster; ``None``: it is none.
    :ivar e2b: The E2B-compatible API; ``None``: it is not served.
    """

    image_dir: str = DEFAULT_IMAGE_DIR
    host_groups: tuple[HostGroupConfig, ...] = ()
    kubernetes: KubernetesConfig | None = None
    e2b: E2bConfig | None = None

    def group(self, name: str) -> HostGroupConfig | None:
        """
        The host group called ``name``, or ``None``; the API answers 404 for
        an unknown group, so absence is an ordinary answer here.
        """
        for group in self.host_groups:
            if group.name == name:
                return group
        return None
