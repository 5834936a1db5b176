# -*- test-case-name: tests.api.test_openapi,tests.api.inputs.test_nodes -*-
"""
Host groups and nodes: listings, one node described, create, delete, the
console's tail, the agent's health and tags.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from attrs import field, frozen

from ...codehost import CODEHOST_USER_PATTERN
from ...config import MAX_USERDATA
from ...devices.pci import MAX_NODE_DEVICES, PCI_ADDRESS_PATTERN
from ...nodes.model import (HOSTNAME_PATTERN, MAX_FORK_COUNT, LOGIN_USER_PATTERN, MAX_NODE_SECRETS, MAX_SSH_KEY_LENGTH, MAX_SSH_KEYS,
                             SECRET_NAME_PATTERN)
from .fields import constrained, tag_list, unsupported


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
    daemon has no commits).  ``idle_suspended`` is there (true) only while
    the node sleeps because its group's ``idle_suspend`` timer suspended it:
    the next request that needs its guest wakes it (the listing shows
    ``Suspended`` either way).
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
    idle_suspended: bool | None = None


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
        "maxItems": MAX_SSH_KEYS, "items": {"type": "string", "minLength": 1, "maxLength": MAX_SSH_KEY_LENGTH},
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
        "maxItems": MAX_NODE_SECRETS, "items": {"type": "string", "pattern": f"^{SECRET_NAME_PATTERN}$"},
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
class TagsUpdate:
    """
    The body of ``PATCH /vm/{hostname}/tags``: ``replace`` alone, or ``add``
    and/or ``remove`` (applied together, atomically).  ``null`` counts as
    absent; ``[]`` is present (``{"replace": []}`` clears the tags).
    """

    add: list[str] | None = tag_list("Tags to append unless the node has them, in this order")
    remove: list[str] | None = tag_list("Tags to drop (those the node does not have are no matter)")
    replace: list[str] | None = tag_list("The node's tags from now on; not with add or remove")

    #: ``replace`` (not null) alone, or ``add`` and/or ``remove`` (not null) without it.
    __json_schema__: ClassVar[dict[str, Any]] = {"anyOf": [
        {"required": ["replace"], "properties": {"replace": {"type": "array"}, "add": {"type": "null"},
                                                 "remove": {"type": "null"}}},
        {"required": ["add"], "properties": {"add": {"type": "array"}, "replace": {"type": "null"}}},
        {"required": ["remove"], "properties": {"remove": {"type": "array"}, "replace": {"type": "null"}}},
    ]}


@frozen
class ForkNodeRequest:
    """The body of ``POST /vm/{hostname}/fork``; every field optional (an empty body forks one child)."""

    count: int | None = constrained({
        "minimum": 1, "maximum": MAX_FORK_COUNT,
        "description": f"How many children (default 1, at most {MAX_FORK_COUNT})",
    })
    tags: list[str] | None = tag_list("The children's tags")
    persistent: bool | None = constrained({"description": "Whether the children are persistent (default: the parent's)"})


@frozen
class NodeTags:
    """A node's tags, in their order (``GET`` and ``PATCH /vm/{hostname}/tags``)."""

    hostname: str
    tags: list[str]
