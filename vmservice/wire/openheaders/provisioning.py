# -*- test-case-name: tests.wire.test_provisionheaders -*-
"""
The OPEN headers of the requests that configure the guest, each followed by a
body: ``{"op": "secrets", ...}`` (:class:`SecretsHeader`, its entries
:class:`SecretEntry`), ``{"op": "userdata", ...}`` (:class:`UserdataHeader`)
and ``{"op": "login", ...}`` (:class:`LoginHeader`), written by the host and
read by the guest (documented in ``docs/agent-protocol.md``).  Stdlib only:
the guest imports this module.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Mapping

from vmservice.wire.openheaders.fields import BadHeader, FlatHeader, header_object

#: Most secrets one request places.
MAX_SECRETS = 64
#: Most bytes of userdata (the host checks first).
MAX_USERDATA = 512 * 1024
_SECRET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")


@dataclass(frozen=True)
class SecretEntry:
    """
    One secret: a file of ``/run/secrets``.

    :ivar name: its file name (``[A-Za-z0-9][A-Za-z0-9._-]*``, at most 128 characters).
    :ivar size: the bytes of the body that are its content.
    :ivar mode: the file's mode (0 .. 0o7777).
    :ivar uid: its owner.
    :ivar gid: its group.
    """

    name: str
    size: int
    mode: int
    uid: int
    gid: int

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON object."""
        return asdict(self)

    @classmethod
    def from_json(cls, value: object) -> SecretEntry:
        """
        Read and check an entry: its name, then size, mode, uid and gid.

        :raises BadHeader: naming the field and the secret.
        """
        if not isinstance(value, dict):
            raise BadHeader("each entry must be an object")
        name = value.get("name")
        if not isinstance(name, str) or not _SECRET_NAME.match(name):
            raise BadHeader(f"bad secret name {name!r}")
        numbers: list[int] = []
        for key in ("size", "mode", "uid", "gid"):
            number = value.get(key)
            if type(number) is not int or not 0 <= number < 2**32 or (key == "mode" and number > 0o7777):
                raise BadHeader(f"bad {key} for secret {name!r}")
            numbers.append(number)
        return cls(name, *numbers)


@dataclass(frozen=True)
class SecretsHeader:
    """
    Every secret the guest is to hold, the body being their contents one after the other.

    :ivar entries: at most :data:`MAX_SECRETS`, named once each.
    """

    entries: tuple[SecretEntry, ...]

    def to_json(self) -> dict[str, Any]:
        """The header as a JSON object."""
        return {"op": "secrets", "entries": [entry.to_json() for entry in self.entries]}

    @classmethod
    def from_json(cls, value: object) -> SecretsHeader:
        """
        Read and check a header (its ``op`` is not looked at): the list, each
        entry in turn, then that no name comes twice.

        :raises BadHeader: naming what is wrong.
        """
        raw = header_object(value).get("entries")
        if not isinstance(raw, list) or len(raw) > MAX_SECRETS:
            raise BadHeader(f"entries must be a list of at most {MAX_SECRETS}")
        entries = tuple(SecretEntry.from_json(entry) for entry in raw)
        if len({entry.name for entry in entries}) != len(entries):
            raise BadHeader("a secret is named twice")
        return cls(entries)

    @property
    def size(self) -> int:
        """The bytes of the body: the sum of the entries' sizes."""
        return sum(entry.size for entry in self.entries)


@dataclass(frozen=True)
class UserdataHeader(FlatHeader):
    """
    Run the node's userdata once; the body is the script.

    :ivar size: the script's bytes (0 .. :data:`MAX_USERDATA`; 0 for none).
    """

    op: ClassVar[str] = "userdata"
    size: int

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> tuple[int]:
        size = header.get("size")
        if type(size) is not int or not 0 <= size <= MAX_USERDATA:
            raise BadHeader(f"size must be an integer from 0 to {MAX_USERDATA}")
        return (size,)


@dataclass(frozen=True)
class LoginHeader(FlatHeader):
    """
    Make the login user and install its keys; the body is the authorized keys, one a line.

    :ivar user: the user's name (``[a-z_][a-z0-9_-]*``, at most 32 characters).
    """

    op: ClassVar[str] = "login"
    user: str

    @classmethod
    def read(cls, header: Mapping[str, Any]) -> tuple[str]:
        user = header.get("user")
        if not isinstance(user, str) or not _USER.match(user):
            raise BadHeader(f"bad user name {user!r}")
        return (user,)


__all__ = ["LoginHeader", "MAX_SECRETS", "MAX_USERDATA", "SecretEntry", "SecretsHeader", "UserdataHeader"]
