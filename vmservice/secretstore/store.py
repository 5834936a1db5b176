# -*- test-case-name: tests.secretstore.test_store -*-
"""
:class:`SecretStore`: the secrets of one daemon as files under
``state_dir`` (see :mod:`vmservice.secretstore` for the layout, the limits
and what never leaves the store).
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from typing import Callable, Sequence

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ..durable import remove_temporaries, write_atomic
from ..errors import BadRequest, Conflict, Internal, NotFound, ServiceError, StateDirFull, no_room
from ..nodes.model import SECRET_NAME_PATTERN
from .records import (
    MAX_SECRET_SIZE,
    MAX_SECRETS,
    Secret,
    SecretChange,
    SecretMeta,
    SecretSpec,
    check_attributes,
    check_secret_name,
    check_size,
)

#: Logged under the package's name, as when it was one module.
log = Logger(namespace="vmservice.secretstore")

_SUFFIX = ".secret"
#: The temporary files of earlier versions' writes (``<name>.tmp<pid>``).
_OLD_TEMPORARY = re.compile(r".+\.tmp[0-9]+\Z")
#: The longest metadata line read (it is far shorter).
_MAX_META_LINE = 4096


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
        check_attributes(spec.permissions, spec.uid, spec.gid)
        check_size(name, spec.data)
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
        check_attributes(change.permissions, change.uid, change.gid)
        check_size(name, change.data)
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
