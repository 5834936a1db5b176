# -*- test-case-name: tests.e2b.test_users -*-
"""
The users a data-plane call may act as, and which one a call names.

envd runs a call as the user its ``Authorization: Basic base64("name:")``
header names, or as its default user (``user``) when it names none.  The
guest image for sandboxes (the ``e2b`` recipe) has exactly two: ``root`` and
``user`` (uid and gid 1000, home ``/home/user``); any other name is
refused as envd refuses a user it cannot look up.
"""

from __future__ import annotations

import binascii
from base64 import b64decode

from attrs import frozen

from .connect import Code, ConnectError


@frozen
class EnvdUser:
    """
    A user of the guest.

    :ivar name: its name.
    :ivar uid: its user id.
    :ivar gid: its group id.
    :ivar home: its home directory (its commands' default working directory).
    """

    name: str
    uid: int
    gid: int
    home: str


ROOT = EnvdUser("root", 0, 0, "/root")
USER = EnvdUser("user", 1000, 1000, "/home/user")
#: The users by name.
USERS: dict[str, EnvdUser] = {user.name: user for user in (ROOT, USER)}
#: The user of a call that names none.
DEFAULT_USER = USER


def user_named(name: str | None) -> EnvdUser:
    """
    The user ``name`` (:data:`DEFAULT_USER` for ``None`` or ``""``).

    :raise ConnectError: ``unauthenticated`` for a name the guest has not.
    """
    if not name:
        return DEFAULT_USER
    try:
        return USERS[name]
    except KeyError:
        raise ConnectError(Code.UNAUTHENTICATED, f"invalid username: '{name[:64]}'") from None


def user_of_authorization(header: bytes | None) -> EnvdUser:
    """
    The user an ``Authorization`` header names (``Basic base64("name:")``).

    :raise ConnectError: ``unauthenticated`` for a header that is not Basic
        credentials, or a user the guest has not.
    """
    if header is None:
        return DEFAULT_USER
    scheme, _, credentials = header.strip().partition(b" ")
    if scheme.lower() != b"basic":
        raise ConnectError(Code.UNAUTHENTICATED, "the Authorization header is not Basic credentials")
    try:
        decoded = b64decode(credentials.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise ConnectError(Code.UNAUTHENTICATED, "the Authorization header's credentials are malformed") from None
    return user_named(decoded.partition(":")[0])


__all__ = ["DEFAULT_USER", "EnvdUser", "ROOT", "USER", "USERS", "user_named", "user_of_authorization"]
