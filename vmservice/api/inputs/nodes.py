# -*- test-case-name: tests.api.inputs.test_nodes -*-
"""
The body of a create-node request, into the domain's
:class:`~vmservice.nodes.model.CreateRequest`: its keys, secrets, login user,
userdata, PCI devices and tags checked.
"""

from __future__ import annotations

import re

import attrs
from twisted.web.iweb import IRequest

from ...codehost import CODEHOST_USER_PATTERN
from ...config import MAX_USERDATA
from ...devices.pci import MAX_NODE_DEVICES, normalise_address
from ...errors import BadRequest
from ...nodes.model import CreateRequest, LOGIN_USER_PATTERN, MAX_NODE_SECRETS, MAX_SSH_KEYS, SECRET_NAME_PATTERN, unique
from ...sshkeys import InvalidPublicKey, parse_public_key
from ..models.nodes import CreateNodeRequest
from .bodies import json_object, structure
from .tags import field_tags


def create_request(request: IRequest) -> CreateRequest:
    """
    Parse the body of a create-node request into the domain's request.

    Empty values (``""``, ``[]``, ``null``) of unsupported fields are
    accepted, as clients send zero values; anything else is refused.  PCI
    addresses are checked for their syntax here and against the host when
    the node is made.
    """
    body = structure(json_object(request), CreateNodeRequest)
    for field in attrs.fields(CreateNodeRequest):
        reason = field.metadata.get("unsupported")
        if reason is not None and getattr(body, field.name):
            raise BadRequest(f"field {field.name!r}: {reason}", code="not_supported")
    for name in ("ram_bytes", "cpus", "gpu_count"):
        value = getattr(body, name)
        if value is not None and value < 0:
            raise BadRequest(f"field {name!r} must not be negative", code="invalid_body")
    if (body.gpu_count or 0) > MAX_NODE_DEVICES:
        raise BadRequest(f"field 'gpu_count': at most {MAX_NODE_DEVICES}", code="too_many_pci_devices")
    tags = field_tags("tags", body.tags or [])
    return CreateRequest(
        hostname=body.hostname or None,
        ram_bytes=body.ram_bytes or None,
        cpus=body.cpus or None,
        persistent=body.persistent,
        protected=bool(body.protected),
        tags=tags,
        ip=body.ip or None,
        userdata=_userdata(body.userdata or ""),
        secrets=_secret_names(body.secrets or []),
        ssh_keys=_ssh_keys(body.ssh_keys or []),
        import_user=_login_user(body.import_user or "") or None,
        codehost_user=_codehost_user(body.codehost_user or "") or None,
        pci_devices=_pci_devices(body.pci_devices or []),
        gpu_count=body.gpu_count or 0,
        disk_image=body.disk_image or None,
    )


def _pci_devices(addresses: list[str]) -> tuple[str, ...]:
    """:raise BadRequest: (``invalid_pci_address``) one is not a PCI address; (``too_many_pci_devices``)."""
    if len(addresses) > MAX_NODE_DEVICES:
        raise BadRequest(f"field 'pci_devices': at most {MAX_NODE_DEVICES} devices", code="too_many_pci_devices")
    found = []
    for index, address in enumerate(addresses):
        try:
            found.append(normalise_address(address))
        except BadRequest as error:
            raise BadRequest(f"field 'pci_devices[{index}]': {error.message}", code=error.code) from None
    return unique(found)


def _userdata(script: str) -> str:
    """:raise BadRequest: (``userdata_too_large``) more than MAX_USERDATA bytes."""
    size = len(script.encode("utf-8"))
    if size > MAX_USERDATA:
        raise BadRequest(f"field 'userdata' is {size} bytes; at most {MAX_USERDATA} are allowed", code="userdata_too_large")
    return script


def _secret_names(names: list[str]) -> tuple[str, ...]:
    """:raise BadRequest: (``invalid_body``) too many, or one that cannot be a secret's name."""
    if len(names) > MAX_NODE_SECRETS:
        raise BadRequest(f"field 'secrets': at most {MAX_NODE_SECRETS} secrets", code="invalid_body")
    for index, name in enumerate(names):
        if not re.fullmatch(SECRET_NAME_PATTERN, name):
            raise BadRequest(f"field 'secrets[{index}]': {name[:64]!r} is not a secret's name", code="invalid_body")
    return unique(names)


def _ssh_keys(keys: list[str]) -> tuple[str, ...]:
    """
    The keys, each as its normalised line (:func:`~vmservice.sshkeys.parse_public_key`), once.

    :raise BadRequest: (``invalid_ssh_key``) too many, or one that is not an
        accepted OpenSSH public key line; the message names its index.
    """
    if len(keys) > MAX_SSH_KEYS:
        raise BadRequest(f"field 'ssh_keys': at most {MAX_SSH_KEYS} keys", code="invalid_ssh_key")
    lines = []
    for index, key in enumerate(keys):
        try:
            lines.append(parse_public_key(key).line())
        except InvalidPublicKey as error:
            raise BadRequest(f"field 'ssh_keys[{index}]' is not an OpenSSH public key: {error}",
                             code="invalid_ssh_key") from None
    return unique(lines)


def _codehost_user(name: str) -> str:
    """:raise BadRequest: (``invalid_codehost_user``) not a code-host user name."""
    if name and not re.fullmatch(CODEHOST_USER_PATTERN, name):
        raise BadRequest(f"field 'codehost_user': {name[:64]!r} is not a code-host user name "
                         "(letters, digits and single hyphens inside, at most 39)", code="invalid_codehost_user")
    return name


def _login_user(name: str) -> str:
    """:raise BadRequest: (``invalid_import_user``) not a user name."""
    if name and not re.fullmatch(LOGIN_USER_PATTERN, name):
        raise BadRequest(f"field 'import_user': {name[:64]!r} is not a user name ({LOGIN_USER_PATTERN})",
                         code="invalid_import_user")
    return name
