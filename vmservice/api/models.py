# -*- test-case-name: tests.api.test_openapi -*-
"""
The JSON shapes of the API (requests and responses) as attrs records.

They are the single description of every body: the input parser structures
requests into them, the renderer unstructures responses from them, and the
OpenAPI document is generated from them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from attrs import field, frozen

from ..codehost import CODEHOST_USER_PATTERN
from ..config import MAX_USERDATA
from ..nodes.model import (HOSTNAME_PATTERN, LOGIN_USER_PATTERN, MAX_NODE_SECRETS, MAX_SSH_KEY_LENGTH, MAX_SSH_KEYS,
                           MAX_TAG_LENGTH, MAX_TAGS, SECRET_NAME_PATTERN, TAG_PATTERN)
from ..secretstore import MAX_ID, MAX_SECRET_SIZE
from ..devices.pci import MAX_NODE_DEVICES, PCI_ADDRESS_PATTERN
from .query import FILE_MODE, GUEST_PATH


def constrained(schema: dict[str, Any], default: Any = None) -> Any:
    """
    A request field whose JSON schema says more than its type: what the
    input parser refuses (so that a request valid by the OpenAPI document is
    never refused as invalid).
    """
    return field(default=default, metadata={"schema": schema})


def unsupported(reason: str, empty: dict[str, Any]) -> Any:
    """
    A request field the daemon cannot honour yet: only its empty value is
    accepted (clients send zero values).  The one declaration of it: the
    input parser refuses anything else with ``reason`` (400 ``not_supported``),
    and the OpenAPI document shows the field as empty-only.

    :param empty: the JSON-schema words for "empty" (``maxLength: 0`` ...).
    """
    return field(default=None, metadata={"schema": {**empty, "description": f"Not supported: {reason}"},
                                         "unsupported": reason})


_EMPTY_TEXT = {"maxLength": 0}

#: A list of tags in a request: what :func:`vmservice.nodes.model.tag_problem`
#: accepts, at most MAX_TAGS of them.
_TAG_LIST = {
    "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_LENGTH, "pattern": f"^{TAG_PATTERN}$"},
    "maxItems": MAX_TAGS,
}


def tag_list(description: str) -> Any:
    """A request field that is a list of tags (see :data:`_TAG_LIST`)."""
    return constrained({**_TAG_LIST, "description": description})


@frozen
class ErrorResponse:
    """Every error: a message and a stable snake_case code."""

    error: str
    code: str | None = None


@frozen
class Info:
    """The daemon's version (``GET /info``)."""

    version: str
    git_commit: str
    platform: str
    arch: str


@frozen
class HostGroup:
    """A host group: the template its nodes are made from."""

    name: str
    count: int
    ram_bytes: int
    cpus: int
    gpu_count: int
    arch: str


@frozen
class ImageSummary:
    """
    A built guest image (``GET /images``): ``size`` is the bytes of its
    kernel, initramfs and root file system; ``source`` is ``recipe:NAME`` or
    ``oci:REFERENCE``; ``recipe_hash`` is the key of its build.
    """

    name: str
    size: int
    created: datetime
    source: str
    recipe_hash: str | None = None
    ssh_server: bool | None = None


@frozen
class Node:
    """One node in a listing."""

    hostname: str
    hostgroup: str
    ip: str
    ram_bytes: int
    cpus: int
    created_at: datetime
    tags: list[str]
    arch: str
    status: str
    persistent: bool


@frozen
class NetworkPolicy:
    """Where a node's VM may connect to: CIDR lists (an empty ``allow`` limits nothing)."""

    allow: list[str]
    drop: list[str]


@frozen
class NetworkDescription:
    """
    A node's network: the mode and policy of its host group (there is no
    per-node policy, so ``effective`` is ``host_group``'s and no
    ``override`` is ever sent), its address, gateway, MAC and bridge.
    """

    mode: str = field(metadata={"schema": {"enum": ["none", "isolated", "bridge"]}})
    policy_source: str = field(metadata={"schema": {"enum": ["host_group"]}})
    host_group: NetworkPolicy
    effective: NetworkPolicy
    address: str | None = None
    gateway: str | None = None
    mac: str | None = None
    bridge: str | None = None


@frozen
class DiskDescription:
    """
    A node's disk as read from the file: its format, the size the guest sees,
    the space it takes on the host, and the image file it is an overlay on.
    """

    path: str
    format: str
    size_bytes: int
    allocated_bytes: int
    backing_file: str | None = None


@frozen
class NodeDescription(Node):
    """
    One node described (``GET /vm/{hostname}``): the Node fields, then its
    storage kind and image name (strings, as existing clients decode them),
    its network, and what is found on the host.  Fields that are not known
    are left out; ``commit_id`` and ``parent_commit_id`` always are (this
    daemon has no commits).
    """

    protected: bool
    snapshot: bool
    agent_connected: bool
    storage: str | None = None
    image: str | None = None
    network: NetworkDescription | None = None
    disk: DiskDescription | None = None
    pid: int | None = None
    kernel: str | None = None
    initrd: str | None = None
    hypervisor: str | None = None
    pci_devices: list[str] | None = None


@frozen
class CreateNodeRequest:
    """
    The body of ``POST /hostgroup/{name}/nodes``; every field optional.
    Fields the daemon cannot honour yet are refused with 400 when set.
    """

    hostname: str | None = constrained({"pattern": f"^(?:{HOSTNAME_PATTERN})?$"})
    ip: str | None = None
    ram_bytes: int | None = constrained({"minimum": 0})
    cpus: int | None = constrained({"minimum": 0})
    gpu_count: int | None = constrained({
        "minimum": 0, "maximum": MAX_NODE_DEVICES,
        "description": "How many of the host group's GPUs (its gpus list) to pass through; 400 when not enough are free",
    })
    persistent: bool | None = None
    disk_image: str | None = constrained({
        "description": "The name of a built image (GET /images) to make the node from; the host group's image "
                       "when empty",
    })
    import_user: str | None = constrained({
        "pattern": f"^(?:{LOGIN_USER_PATTERN})?$",
        "description": "The login user made in the guest for SSH (default root when keys are given)",
    })
    ssh_keys: list[str] | None = constrained({
        "maxItems": MAX_SSH_KEYS, "items": {"type": "string", "maxLength": MAX_SSH_KEY_LENGTH},
        "description": "OpenSSH public keys of the login user (TYPE BASE64 [COMMENT], no options); the SSH "
                       "server starts when there are any",
    })
    protected: bool | None = None
    userdata: str | None = constrained({
        "description": f"A shell script run once as root at the first boot (at most {MAX_USERDATA} bytes "
                       "with the host group's)",
    })
    tags: list[str] | None = tag_list("The node's tags; duplicates collapse")
    secrets: list[str] | None = constrained({
        "maxItems": MAX_NODE_SECRETS, "items": {"type": "string"},
        "description": "Names of stored secrets placed in the guest as /run/secrets/NAME",
    })
    pci_devices: list[str] | None = constrained({
        "maxItems": MAX_NODE_DEVICES, "items": {"type": "string", "pattern": f"^{PCI_ADDRESS_PATTERN}$"},
        "description": "Host PCI devices (0000:01:00.0 or 01:00.0) to pass through; each must be bound to vfio-pci "
                       "in a viable IOMMU group and held by no other node",
    })
    codehost_user: str | None = constrained({
        "pattern": f"^(?:{CODEHOST_USER_PATTERN})?$",
        "description": "Take the login user's keys from this user of the code host instead of ssh_keys",
    })
    network: dict[str, list[str]] | None = unsupported("per-node network policy is not supported yet",
                                                       {"maxProperties": 0})


@frozen
class CreateNodeResponse:
    """What create answers: the new node's identity."""

    hostname: str
    hostgroup: str
    ip: str
    created_at: datetime
    arch: str


@frozen
class DeleteResponse:
    """What delete answers; ``disk_removed`` is the text ``"true"`` or ``"false"``."""

    message: str
    disk_removed: str
    error: str = ""


@frozen
class LogsResponse:
    """The tail of a node's serial console."""

    hostname: str
    lines: int
    content: str


@frozen
class AgentHealth:
    """The guest agent's health; uptimes are integer nanoseconds."""

    hostname: str
    agent_uptime: int
    agent_version: str
    system_uptime: int
    userdata_ran: bool
    ip: str = field(default="")
    userdata_exit_code: int | None = None


@frozen
class FsEntry:
    """
    One file-system entry in a guest (readdir items, stat, mkdir and remove
    results).  ``mtime`` is RFC 3339 in UTC with up to nanosecond digits, because
    existing clients decode it as a time; ``mode`` is octal text of the permission
    bits including setuid/setgid/sticky (``0644``, ``1777``).
    """

    name: str
    type: str
    size: int
    mtime: str
    mode: str


@frozen
class CopyResult:
    """
    The answer to an upload (``POST /vm/{hostname}/cp``): where it was written,
    in which mode, how many body bytes arrived and, for a tar, how many entries
    were extracted.
    """

    path: str
    mode: str
    size: int
    entries: int | None = None


@frozen
class FsMkdirRequest:
    """
    The body of ``POST /vm/{hostname}/fs/mkdir``.  ``mode`` is octal text
    (``0755``, the default when absent or empty).
    """

    path: str = field(metadata={"schema": GUEST_PATH.schema()})
    recursive: bool | None = None
    mode: str | None = constrained({"pattern": f"^(?:{FILE_MODE.pattern})?$"})


@frozen
class BackgroundStarted:
    """What ``POST /vm/{hostname}/exec?background=true`` answers (201)."""

    exec_id: str
    pid: int
    started_at: datetime
    ring_bytes: int


@frozen
class BackgroundExec:
    """
    A background exec (``GET /vm/{hostname}/exec/{exec_id}`` and the list):
    ``exit_code``, ``signal`` and ``ended_at`` once it has ended; output
    counts in bytes; ``next_id`` is the id the next log frame gets.
    """

    exec_id: str
    pid: int
    command: str
    args: list[str]
    cwd: str
    uid: int
    gid: int
    started_at: datetime
    running: bool
    bytes_written: int
    bytes_dropped: int
    next_id: int
    ring_bytes: int
    exit_code: int | None = None
    signal: str | None = None
    ended_at: datetime | None = None


@frozen
class KillRequest:
    """
    The optional body of ``POST /vm/{hostname}/exec/{exec_id}/kill``: the
    signal (default ``TERM``; ``SIG`` prefix and case do not matter) and, for
    ``TERM``, ``HUP``, ``INT`` and ``QUIT``, the milliseconds before ``KILL``
    follows (default 5000).
    """

    signal: str | None = constrained({"pattern": "^(?i:(SIG)?(TERM|KILL|HUP|INT|QUIT|USR1|USR2))?$"})
    grace_ms: int | None = constrained({"minimum": 0, "maximum": 3_600_000})


@frozen
class KillResponse:
    """What a kill did: ``signal_sent`` is empty when the exec had already ended."""

    exec_id: str
    pid: int
    running: bool
    signal_sent: str


@frozen
class WaitExitResponse:
    """Where a wait for an exec's end stopped (200 even when it timed out)."""

    exec_id: str
    running: bool
    timed_out: bool
    exit_code: int | None = None
    signal: str | None = None
    ended_at: datetime | None = None


@frozen
class ExecDeleted:
    """What deleting an ended background exec answers."""

    exec_id: str
    reaped: bool


@frozen
class TagsUpdate:
    """
    The body of ``PATCH /vm/{hostname}/tags``: ``replace`` alone, or ``add``
    and/or ``remove`` (applied together, atomically).  ``null`` counts as
    absent; ``[]`` is present (``{"replace": []}`` clears the tags).
    """

    add: list[str] | None = tag_list("Tags to append unless the node has them, in this order")
    remove: list[str] | None = tag_list("Tags to drop (those the node does not have are no matter)")
    replace: list[str] | None = tag_list("The node's tags from now on; not with add or remove")


@frozen
class NodeTags:
    """A node's tags, in their order (``GET`` and ``PATCH /vm/{hostname}/tags``)."""

    hostname: str
    tags: list[str]


#: The uid and gid of a secret's file: a uint32 (4294967295 is no owner to the kernel).
_SECRET_ID = {"format": "uint32", "minimum": 0, "maximum": MAX_ID}
#: A secret's permission bits: octal text.
_SECRET_PERMISSIONS = {"pattern": "^0?[0-7]{1,3}$", "description": "Octal permission bits, e.g. 0400 (at most 0777)"}


@frozen
class Secret:
    """A stored secret's metadata; its content is never returned."""

    name: str
    size: int
    permissions: str = field(metadata={"schema": {"description": "Octal text, e.g. 0600"}})
    uid: int = field(metadata={"schema": _SECRET_ID})
    gid: int = field(metadata={"schema": _SECRET_ID})
    mod_time: datetime
    modified_at: datetime = field(metadata={"schema": {"description": "The same as mod_time, under the "
                                                                      "name existing clients read"}})


@frozen
class CreateSecretRequest:
    """
    The body of ``POST /secrets``: the name, the content as base64, and the
    guest file's permissions (default 0600), uid and gid (default 0).
    """

    name: str = field(metadata={"schema": {"pattern": f"^{SECRET_NAME_PATTERN}$"}})
    data: str = field(metadata={"schema": {
        "contentEncoding": "base64", "description": f"The content, standard base64 (at most {MAX_SECRET_SIZE} bytes "
                                                   "once decoded)"}})
    permissions: str | None = constrained(_SECRET_PERMISSIONS)
    uid: int | None = constrained(_SECRET_ID)
    gid: int | None = constrained(_SECRET_ID)


@frozen
class UpdateSecretRequest:
    """The body of ``PATCH /secrets/{name}``: what changes; absent fields stay as they are."""

    data: str | None = constrained({
        "contentEncoding": "base64", "description": f"The new content, standard base64 (at most {MAX_SECRET_SIZE} "
                                                   "bytes once decoded)"})
    permissions: str | None = constrained(_SECRET_PERMISSIONS)
    uid: int | None = constrained(_SECRET_ID)
    gid: int | None = constrained(_SECRET_ID)
