# -*- test-case-name: tests.cli.test_main,tests.integration.cli.test_main -*-
"""
The commands of host groups and nodes: ``info``, ``groups``, ``list``, ``create``
(:func:`create_body`), ``delete``, ``describe`` and ``health``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..client import ApiError, Client
from . import listings, output
from .arguments import duration, positive_int, size
from .commands import Command, add_host_and_json, add_json_option, add_node_argument
from .context import Context, Failed

__all__ = ["CREATE", "DELETE", "DESCRIBE", "GROUPS", "HEALTH", "INFO", "LIST", "create_body"]


async def _info(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl info``: show the daemon's version."""
    out = context.out
    info = await client.info()
    out.write(output.format_json(info) if options.json else listings.format_info(info))
    return 0


INFO = Command("info", "show the daemon's version", add_json_option, _info)


async def _groups(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl groups``: list the host groups."""
    out = context.out
    groups = await client.hostgroups()
    out.write(output.format_listing(groups, options.json, output.GROUP_HEADERS, output.group_rows))
    return 0


GROUPS = Command("groups", "list the host groups", add_json_option, _groups)


async def _list(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl list``: list nodes, of all groups or of GROUP."""
    out = context.out
    nodes = await client.nodes(options.group, tag=options.tag, tag_prefix=options.tag_prefix)
    out.write(output.format_listing(nodes, options.json, output.NODE_HEADERS, output.node_rows))
    return 0


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl list``."""
    parser.add_argument("group", nargs="?", metavar="GROUP", help="only the nodes of this host group")
    match = parser.add_mutually_exclusive_group()
    match.add_argument("--tag", metavar="T", help="only nodes with this exact tag")
    match.add_argument("--tag-prefix", metavar="P", help="only nodes with a tag starting with P")
    add_json_option(parser)


LIST = Command("list", "list nodes, of all groups or of GROUP", _list_arguments, _list)


def create_body(options: argparse.Namespace) -> dict[str, Any]:
    """The CreateNodeRequest of ``vmctl create``: only the fields given."""
    body: dict[str, Any] = {}
    if options.tags:
        body["tags"] = list(options.tags)
    if options.cpus is not None:
        body["cpus"] = options.cpus
    if options.ram_bytes is not None:
        body["ram_bytes"] = options.ram_bytes
    if options.persistent:
        body["persistent"] = True
    if options.protected:
        body["protected"] = True
    if options.hostname:
        body["hostname"] = options.hostname
    if options.userdata:
        body["userdata"] = _read_text(options.userdata)
    if options.secrets:
        body["secrets"] = list(options.secrets)
    if options.ssh_key_files:
        body["ssh_keys"] = [line.strip() for path in options.ssh_key_files for line in _read_text(path).splitlines()
                            if line.strip() and not line.startswith("#")]
    if options.import_user:
        body["import_user"] = options.import_user
    if options.codehost_user:
        body["codehost_user"] = options.codehost_user
    if options.disk_image:
        body["disk_image"] = options.disk_image
    if options.gpu_count:
        body["gpu_count"] = options.gpu_count
    if options.pci_devices:
        body["pci_devices"] = list(options.pci_devices)
    return body


def _read_text(path: str) -> str:
    """The text of file ``path`` (``-``: standard input); :class:`Failed` when it cannot be read."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(os.path.expanduser(path), encoding="utf-8") as stream:
            return stream.read()
    except (OSError, UnicodeDecodeError) as error:
        raise Failed(f"cannot read {path}: {error}") from None


async def _create(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl create``: create a node in GROUP and print its hostname."""
    out = context.out
    node = await client.create_node(options.group, create_body(options), wait=options.wait, timeout=options.timeout)
    out.write(output.format_json(node) if options.json else f"{node['hostname']}\n")
    return 0


def _create_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl create``."""
    parser.add_argument("group", metavar="GROUP")
    parser.add_argument("--wait", choices=("agent", "userdata"),
                        help="answer only once the node is ready (agent: its guest agent answers and its secrets "
                             "and login are in place; userdata: its userdata is over too)")
    parser.add_argument("--timeout", type=duration, metavar="DURATION",
                        help="how long --wait may take, e.g. 2m (daemon default 5m); past it the node is removed")
    parser.add_argument("--tag", action="append", dest="tags", metavar="T", help="a tag (repeat for more)")
    parser.add_argument("--cpus", type=positive_int, metavar="N", help="vCPUs (at most the group's)")
    ram = parser.add_mutually_exclusive_group()
    ram.add_argument("--ram-bytes", type=positive_int, metavar="N", help="memory in bytes (at most the group's)")
    ram.add_argument("--ram", type=size, dest="ram_bytes", metavar="SIZE", help="memory as a size: 512M, 1G")
    parser.add_argument("--persistent", action="store_true", default=None, help="keep the disk when the node is deleted")
    parser.add_argument("--protected", action="store_true", default=None, help="refuse to delete the node")
    parser.add_argument("--hostname", metavar="NAME", help="the node's hostname instead of GROUP-N")
    parser.add_argument("--userdata", metavar="FILE",
                        help="a shell script run once as root at the first boot ('-' reads standard input)")
    parser.add_argument("--secret", action="append", dest="secrets", metavar="NAME",
                        help="a stored secret placed in /run/secrets/NAME (repeat for more)")
    parser.add_argument("--ssh-key", action="append", dest="ssh_key_files", metavar="FILE",
                        help="a file of OpenSSH public keys (e.g. ~/.ssh/id_ed25519.pub) for the login user")
    parser.add_argument("--import-user", metavar="USER", help="the login user (default root when keys are given)")
    parser.add_argument("--codehost-user", metavar="USER", help="take the login user's keys from this code-host user")
    parser.add_argument("--image", dest="disk_image", metavar="IMAGE",
                        help="make the node from this built image (vmctl image list) instead of the group's")
    parser.add_argument("--gpus", type=positive_int, dest="gpu_count", metavar="N",
                        help="pass N of the group's GPUs through to the node")
    parser.add_argument("--pci-device", action="append", dest="pci_devices", metavar="ADDRESS",
                        help="pass the host's PCI device ADDRESS (0000:01:00.0) through to the node (repeat for more)")
    add_json_option(parser, "print the JSON answer instead of the hostname")


CREATE = Command("create", "create a node in GROUP and print its hostname", _create_arguments, _create)


async def _delete(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl delete``: delete node HOSTNAME of GROUP."""
    out = context.out
    result = await client.delete_node(options.group, options.hostname)
    out.write(f"{result.get('message') or 'deleted ' + options.hostname}\n")
    if result.get("error"):
        raise Failed(str(result["error"]))
    return 0


def _delete_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl delete``."""
    parser.add_argument("group", metavar="GROUP")
    add_node_argument(parser, "HOSTNAME")


DELETE = Command("delete", "delete node HOSTNAME of GROUP", _delete_arguments, _delete)


async def _describe(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl describe``: describe a node: its resources, storage, image, network and state."""
    description = await client.describe(options.hostname)
    context.out.write(output.format_json(description) if options.json else listings.format_description(description))
    return 0


DESCRIBE = Command(
    "describe", "describe a node: its resources, storage, image, network and state", add_host_and_json, _describe
)


async def _health(client: Client, options: argparse.Namespace, context: Context) -> int:
    """``vmctl health``: ask a node's guest agent; exit 0 if it answers, 1 otherwise."""
    out = context.out
    try:
        health = await client.health(options.hostname)
    except ApiError as error:
        # 503: the agent should answer but does not; 409: the node has none
        # (paused, stopped, suspended).  Anything else is an ordinary error.
        if error.status not in (409, 503):
            raise
        out.write(f"{options.hostname}: unhealthy: {error.message}\n")
        return 1
    out.write(output.format_json(health) if options.json else listings.format_health(health))
    return 0


def _health_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``vmctl health``."""
    add_node_argument(parser, "HOSTNAME")
    add_json_option(parser)


HEALTH = Command("health", "ask a node's guest agent; exit 0 if it answers, 1 otherwise", _health_arguments, _health)
