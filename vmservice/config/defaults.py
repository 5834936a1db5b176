# -*- test-case-name: tests.config.test_defaults -*-
"""
The configuration's defaults and bounds: what a key means when the file
leaves it out, and the least and most it may say.
"""

from __future__ import annotations

from .units import GiB, KiB, MiB

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
#: How the daemon may reach a group's agents (``agent_transport``, see docs/vsock.md).
AGENT_TRANSPORTS = ("auto", "vsock", "virtio-serial")
