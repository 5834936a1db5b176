# -*- test-case-name: tests.devcluster.test_identities -*-
"""
Who may talk to the development control plane: static tokens and the kubeconfigs that carry them.

The API server reads ``tokens.csv`` (``--token-auth-file``): an administrator (group ``system:masters``),
the scheduler and the controller-manager (the users the default RBAC rules grant their work to), and one
host per node name, ``system:node:NAME`` in group ``system:nodes``, which the Node authorizer and the
NodeRestriction admission plugin confine to its own Node, Lease and Pods. A token once made is kept
(read back from the file), so a restart or a longer ``--nodes`` list leaves the kubeconfigs handed out
valid. Tokens are random and static: for development only.

Kubeconfigs are written by a YAML library (quoting and escapes are its business: any path or name
reads back as it was; non-ASCII text is escaped).
"""

from __future__ import annotations

import csv
import io
import secrets
from typing import Iterable, Mapping

import yaml
from attrs import frozen

__all__ = ["ADMIN", "CONTROLLER_MANAGER", "SCHEDULER", "Identity", "identities", "node_user", "parse_tokens",
           "render_kubeconfig", "render_tokens"]

ADMIN = "admin"
SCHEDULER = "system:kube-scheduler"
CONTROLLER_MANAGER = "system:kube-controller-manager"


@frozen
class Identity:
    """
    A user of the token file.

    :ivar user: the user name (``system:node:vms-a``).
    :ivar groups: its groups.
    :ivar token: its bearer token.
    """

    user: str
    groups: tuple[str, ...]
    token: str


def node_user(name: str) -> str:
    """The user a host of node ``name`` is: ``system:node:NAME``."""
    return f"system:node:{name}"


def identities(nodes: Iterable[str], known: Mapping[str, str]) -> list[Identity]:
    """
    The administrator, the scheduler, the controller-manager and one identity per node name; each with
    its token of ``known`` (``{user: token}``) if there is one, else a new random one.
    """
    wanted = [(ADMIN, ("system:masters",)), (SCHEDULER, ()), (CONTROLLER_MANAGER, ())]
    wanted += [(node_user(name), ("system:nodes",)) for name in nodes]
    return [Identity(user, groups, known.get(user) or secrets.token_hex(24)) for user, groups in wanted]


def render_tokens(users: Iterable[Identity]) -> str:
    """The token file: ``token,user,uid,"group,group"`` a line (the uid is the user name)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    for identity in users:
        row = [identity.token, identity.user, identity.user]
        writer.writerow(row + [",".join(identity.groups)] if identity.groups else row)
    return text.getvalue()


def parse_tokens(text: str) -> dict[str, str]:
    """``{user: token}`` of a token file (lines that are not at least ``token,user`` are skipped)."""
    return {row[1]: row[0] for row in csv.reader(io.StringIO(text)) if len(row) >= 2 and row[0] and row[1]}


def render_kubeconfig(server: str, ca_file: str, user: str, token: str) -> str:
    """A kubeconfig for ``user`` with ``token`` at ``server``, trusting the CA in ``ca_file``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "vmservice-dev", "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "vmservice-dev", "context": {"cluster": "vmservice-dev", "user": user}}],
        "current-context": "vmservice-dev",
    }
    return yaml.safe_dump(config, default_flow_style=False, sort_keys=False, allow_unicode=False)
