# -*- test-case-name: tests.secretstore.test_records -*-
"""
What the secrets store holds and takes: a secret's metadata and content, a
secret to create, a change to one, and the limits and checks of each (names,
permission bits, ids, sizes).
"""

from __future__ import annotations

import re
from datetime import datetime

from attrs import field, frozen

from ..errors import BadRequest
from ..nodes.model import SECRET_NAME_PATTERN

#: Most bytes of one secret's content.
MAX_SECRET_SIZE = 1 << 20
#: Most secrets one store (one daemon) holds.
MAX_SECRETS = 1024
#: The permission bits of a secret created without any.
DEFAULT_PERMISSIONS = 0o600
#: The largest uid or gid a secret may be owned by (4294967295 is "no owner" to the kernel).
MAX_ID = 2**32 - 2


def check_secret_name(name: str) -> str:
    """
    ``name`` if it can name a secret.

    :raise BadRequest: (``invalid_secret_name``) it cannot.
    """
    if not re.fullmatch(SECRET_NAME_PATTERN, name):
        raise BadRequest(
            f"{name[:64]!r} is not a secret's name: letters, digits, '.', '_' and '-', starting with a letter or "
            "digit, at most 128 characters", code="invalid_secret_name")
    return name


def check_attributes(permissions: int | None, uid: int | None, gid: int | None) -> None:
    """:raise BadRequest: (``invalid_secret``) permission bits or ids out of range."""
    if permissions is not None and not 0 <= permissions <= 0o777:
        raise BadRequest("permissions must be 0000 .. 0777", code="invalid_secret")
    for what, value in (("uid", uid), ("gid", gid)):
        if value is not None and not 0 <= value <= MAX_ID:
            raise BadRequest(f"{what} must be 0 .. {MAX_ID}", code="invalid_secret")


def check_size(name: str, data: bytes | None) -> None:
    """:raise BadRequest: (``secret_too_large``) content beyond the limit."""
    if data is not None and len(data) > MAX_SECRET_SIZE:
        raise BadRequest(f"secret {name!r} is {len(data)} bytes; at most {MAX_SECRET_SIZE} are allowed",
                         code="secret_too_large")


@frozen
class SecretMeta:
    """
    What is known of a secret besides its content: all that the API shows.

    :ivar name: its name, also its file's name in the guest.
    :ivar size: its content's length in bytes.
    :ivar permissions: its file's permission bits in the guest.
    :ivar uid: its file's owner in the guest.
    :ivar gid: its file's group in the guest.
    :ivar mod_time: when it was created or last changed (UTC).
    """

    name: str
    size: int
    permissions: int
    uid: int
    gid: int
    mod_time: datetime


@frozen
class Secret:
    """A stored secret: its metadata and content (never in its ``repr``)."""

    meta: SecretMeta
    data: bytes = field(repr=False)


@frozen
class SecretSpec:
    """
    A secret to create.

    :ivar name: its name (checked by the store).
    :ivar data: its content.
    :ivar permissions: permission bits in the guest.
    :ivar uid: owner in the guest.
    :ivar gid: group in the guest.
    """

    name: str
    data: bytes = field(repr=False)
    permissions: int = DEFAULT_PERMISSIONS
    uid: int = 0
    gid: int = 0


@frozen
class SecretChange:
    """What an update changes; ``None`` leaves that part as it is."""

    data: bytes | None = field(default=None, repr=False)
    permissions: int | None = None
    uid: int | None = None
    gid: int | None = None

    @property
    def empty(self) -> bool:
        """Whether it changes nothing."""
        return self.data is None and self.permissions is None and self.uid is None and self.gid is None
