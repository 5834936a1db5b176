# -*- test-case-name: tests.test_secretstore -*-
"""
The daemon's secrets store: named blobs that nodes get in their guest's
``/run/secrets`` (see :mod:`vmservice.nodes.provisioning`).

Layout under ``state_dir``::

    secrets/                  the directory, mode 0700
    secrets/<name>.secret     one file per secret, mode 0600: a line of JSON
                              metadata, then the content as it is

Every file is written whole beside its final name and renamed over it
(:func:`vmservice.durable.write_atomic`), so a crash leaves the old secret or
the new one; temporary files a crash left behind are removed at start.  The
store reads the directory on every call (nothing is cached), so the files
are the one truth.

Only metadata ever leaves the store towards the API (:meth:`SecretStore.list`);
the content goes only to guests.  No message, log line or error says
anything of a secret's content: they name the secret and the problem.

Limits: a name matches :data:`~vmservice.nodes.model.SECRET_NAME_PATTERN`
(no path separators, no dot-files, at most 128 characters); a secret holds
at most :data:`MAX_SECRET_SIZE` bytes; the store holds at most
:data:`MAX_SECRETS` secrets.

Subscribers (the fleet) are told a secret's name after it was created,
changed or deleted, so nodes that hold it get the new set at once.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from typing import Callable, Sequence

from attrs import field, frozen
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from .durable import remove_temporaries, write_atomic
from .errors import BadRequest, Conflict, Internal, NotFound, ServiceError, StateDirFull, no_room
from .nodes.model import SECRET_NAME_PATTERN

log = Logger()

__all__ = [
    "DEFAULT_PERMISSIONS",
    "MAX_ID",
    "MAX_SECRETS",
    "MAX_SECRET_SIZE",
    "Secret",
    "SecretChange",
    "SecretMeta",
    "SecretSpec",
    "SecretStore",
    "check_secret_name",
]

#: Most bytes of one secret's content.
MAX_SECRET_SIZE = 1 << 20
#: Most secrets one store (one daemon) holds.
MAX_SECRETS = 1024
#: The permission bits of a secret created without any.
DEFAULT_PERMISSIONS = 0o600
#: The largest uid or gid a secret may be owned by (4294967295 is "no owner" to the kernel).
MAX_ID = 2**32 - 2

_SUFFIX = ".secret"
#: The temporary files of earlier versions' writes (``<name>.tmp<pid>``).
_OLD_TEMPORARY = re.compile(r".+\.tmp[0-9]+\Z")
#: The longest metadata line read (it is far shorter).
_MAX_META_LINE = 4096


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


def _check_attributes(permissions: int | None, uid: int | None, gid: int | None) -> None:
    """:raise BadRequest: (``invalid_secret``) permission bits or ids out of range."""
    if permissions is not None and not 0 <= permissions <= 0o777:
        raise BadRequest("permissions must be 0000 .. 0777", code="invalid_secret")
    for what, value in (("uid", uid), ("gid", gid)):
        if value is not None and not 0 <= value <= MAX_ID:
            raise BadRequest(f"{what} must be 0 .. {MAX_ID}", code="invalid_secret")


def _check_size(name: str, data: bytes | None) -> None:
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


class _Damaged(Internal):
    """A secret's file does not parse (a listing leaves it out)."""

    code = "secret_store_failed"


def _failed(doing: str, name: str | None, error: OSError) -> ServiceError:
    """
    The error of a failed file operation: what, which secret, the system's
    reason (never content); :class:`StateDirFull` when the state directory
    had no room for it (the secret is then as it was).
    """
    which = f" secret {name!r}" if name is not None else ""
    reason = error.strerror or type(error).__name__
    log.error("secrets store: could not {doing}{which}: {reason}", doing=doing, which=which, reason=reason)
    if no_room(error):
        return StateDirFull(f"the secrets store could not {doing}{which}: {reason}; the secret is as it was, "
                            f"and the same request succeeds once the state directory has room")
    return Internal(f"the secrets store could not {doing}{which}: {reason}", code="secret_store_failed")


class SecretStore:
    """
    The secrets of one daemon, in ``<state_dir>/secrets``; implements the
    :class:`~vmservice.nodes.provisioning.SecretSource` the node layer reads.

    :param state_dir: the daemon's state directory.
    :param clock: an ``IReactorTime``, for the time of each change.
    :raise OSError: the directory cannot be made.
    """

    def __init__(self, state_dir: str, clock: IReactorTime) -> None:
        self.directory = os.path.join(state_dir, "secrets")
        self._clock = clock
        self._subscribers: list[Callable[[str], None]] = []
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        # Left by a crash during a write: it may hold content; it is no secret.
        remove_temporaries(self.directory, also=_OLD_TEMPORARY)

    # -- reading -----------------------------------------------------------

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name + _SUFFIX)

    def _names(self) -> list[str]:
        try:
            entries = os.listdir(self.directory)
        except OSError as error:
            raise _failed("read its directory", None, error) from None
        names = [entry[: -len(_SUFFIX)] for entry in entries if entry.endswith(_SUFFIX)]
        return sorted(name for name in names if re.fullmatch(SECRET_NAME_PATTERN, name))

    def _parse_meta(self, name: str, line: bytes) -> SecretMeta:
        """The metadata line of ``name``'s file; ValueError when it is not one."""
        raw = json.loads(line)
        if not isinstance(raw, dict) or raw.get("name") != name:
            raise ValueError("the metadata names another secret")
        numbers: list[int] = []
        for key in ("size", "permissions", "uid", "gid"):
            value = raw.get(key)
            if type(value) is not int or value < 0:
                raise ValueError("bad numbers in the metadata")
            numbers.append(value)
        mod_time = datetime.fromisoformat(str(raw.get("mod_time")))
        return SecretMeta(name, numbers[0], numbers[1], numbers[2], numbers[3], mod_time)

    def _read(self, name: str, *, content: bool) -> Secret:
        """
        Read secret ``name`` (only its metadata line unless ``content``).

        :raise NotFound: there is none.
        :raise Internal: it cannot be read, or its file is damaged.
        """
        try:
            with open(self._path(name), "rb") as stream:
                line = stream.readline(_MAX_META_LINE)
                rest = os.fstat(stream.fileno()).st_size - len(line)
                data = stream.read(MAX_SECRET_SIZE + 1) if content else b""
        except FileNotFoundError:
            raise NotFound(f"secret {name!r} not found", code="secret_not_found") from None
        except OSError as error:
            raise _failed("read", name, error) from None
        try:
            meta = self._parse_meta(name, line)
        except ValueError:
            log.error("secrets store: the file of secret {name} is damaged", name=name)
            raise _Damaged(f"the secrets store's file of secret {name!r} is damaged") from None
        if rest != meta.size or (content and len(data) != meta.size):
            log.error("secrets store: the file of secret {name} is truncated", name=name)
            raise _Damaged(f"the secrets store's file of secret {name!r} is damaged")
        return Secret(meta, data)

    def list(self) -> list[SecretMeta]:
        """
        The metadata of every secret, by name; a damaged file is logged and
        left out.

        :raise Internal: (``secret_store_failed``) the directory cannot be read.
        """
        found = []
        for name in self._names():
            try:
                found.append(self._read(name, content=False).meta)
            except NotFound:
                continue  # deleted meanwhile
            except _Damaged:
                continue  # logged by _read
        return found

    def get(self, name: str) -> Secret:
        """
        The secret ``name``, with its content.

        :raise NotFound: (``secret_not_found``) there is none (or the name
            cannot be one).
        :raise Internal: (``secret_store_failed``) it cannot be read.
        """
        if not re.fullmatch(SECRET_NAME_PATTERN, name):
            raise NotFound(f"secret {name[:64]!r} not found", code="secret_not_found")
        return self._read(name, content=True)

    def resolve(self, names: Sequence[str]) -> Sequence[Secret]:
        """
        The secrets ``names``, in their order.

        :raise BadRequest: (``unknown_secret``) naming every one that does not exist.
        """
        found: list[Secret] = []
        unknown: list[str] = []
        for name in names:
            try:
                found.append(self.get(name))
            except NotFound:
                unknown.append(name)
        if unknown:
            raise BadRequest(f"unknown secrets: {', '.join(unknown)}", code="unknown_secret")
        return found

    # -- changing ----------------------------------------------------------

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock.seconds(), timezone.utc)

    def _write(self, secret: Secret, doing: str) -> None:
        meta = secret.meta
        line = json.dumps({
            "name": meta.name, "size": meta.size, "permissions": meta.permissions, "uid": meta.uid, "gid": meta.gid,
            "mod_time": meta.mod_time.isoformat(),
        }, sort_keys=True).encode()
        try:
            write_atomic(self._path(meta.name), line + b"\n" + secret.data, mode=0o600)
        except OSError as error:
            raise _failed(doing, meta.name, error) from None

    def create(self, spec: SecretSpec) -> SecretMeta:
        """
        Store a new secret.

        :raise BadRequest: a bad name (``invalid_secret_name``), permission
            bits or ids (``invalid_secret``), too much content
            (``secret_too_large``), or the store is full (``too_many_secrets``).
        :raise Conflict: (``secret_exists``) a secret of that name exists.
        :raise Internal: (``secret_store_failed``) it cannot be written.
        """
        name = check_secret_name(spec.name)
        _check_attributes(spec.permissions, spec.uid, spec.gid)
        _check_size(name, spec.data)
        if os.path.exists(self._path(name)):
            raise Conflict(f"secret {name!r} already exists", code="secret_exists")
        if len(self._names()) >= MAX_SECRETS:
            raise BadRequest(f"the store holds {MAX_SECRETS} secrets, its limit", code="too_many_secrets")
        meta = SecretMeta(name, len(spec.data), spec.permissions, spec.uid, spec.gid, self._now())
        self._write(Secret(meta, spec.data), "write")
        log.info("secret {name} created ({size} bytes)", name=name, size=meta.size)
        self._tell(name)
        return meta

    def update(self, name: str, change: SecretChange) -> SecretMeta:
        """
        Change secret ``name``'s content and/or attributes (a change that
        changes nothing leaves it as it is).

        :raise BadRequest: a bad name, permission bits, ids or size (as :meth:`create`).
        :raise NotFound: (``secret_not_found``) there is none.
        :raise Internal: (``secret_store_failed``) it cannot be read or written.
        """
        check_secret_name(name)
        _check_attributes(change.permissions, change.uid, change.gid)
        _check_size(name, change.data)
        old = self._read(name, content=True)
        if change.empty:
            return old.meta
        data = old.data if change.data is None else change.data
        meta = SecretMeta(
            name, len(data),
            old.meta.permissions if change.permissions is None else change.permissions,
            old.meta.uid if change.uid is None else change.uid,
            old.meta.gid if change.gid is None else change.gid,
            self._now(),
        )
        self._write(Secret(meta, data), "write")
        log.info("secret {name} updated ({size} bytes)", name=name, size=meta.size)
        self._tell(name)
        return meta

    def delete(self, name: str) -> None:
        """
        Remove secret ``name``.

        :raise BadRequest: (``invalid_secret_name``) a bad name.
        :raise NotFound: (``secret_not_found``) there is none.
        :raise Internal: (``secret_store_failed``) it cannot be removed.
        """
        check_secret_name(name)
        try:
            os.unlink(self._path(name))
        except FileNotFoundError:
            raise NotFound(f"secret {name!r} not found", code="secret_not_found") from None
        except OSError as error:
            raise _failed("remove", name, error) from None
        log.info("secret {name} deleted", name=name)
        self._tell(name)

    # -- subscribers -------------------------------------------------------

    def subscribe(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """
        Call ``callback`` with a secret's name after it was created, changed
        or deleted.

        :return: stops the calls.
        """
        self._subscribers.append(callback)

        def stop() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return stop

    def _tell(self, name: str) -> None:
        for callback in list(self._subscribers):
            try:
                callback(name)
            except Exception:
                log.failure("a subscriber of the secrets store failed on secret {name}", name=name)
