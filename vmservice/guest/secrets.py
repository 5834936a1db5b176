# -*- test-case-name: tests.guest.test_secrets -*-
"""
The node's secrets in the guest: files in ``/run/secrets``, a tmpfs, so their
content never reaches the node's disk.

``{"op": "secrets", "entries": [{"name", "size", "mode", "uid", "gid"}, ...]}``,
then the contents of the entries one after the other as the body: afterwards
the directory holds exactly these files, each with its mode and owner, every
one replaced atomically (a reader sees the old content or the new, never half),
and nothing else (secrets no longer given are removed).  The answer is
``{"placed": [names], "removed": [names]}``.

The host sends the whole set each time the agent answers (after a boot, a
restore, an agent restart) and whenever a secret changes in its store.

Standard library only: it runs inside the guest.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Optional

from vmservice.guest.bodies import BodyHandler

__all__ = ["MAX_SECRETS", "SECRETS_DIR", "SecretsHandler", "mount_point_type"]

#: Where secrets are placed.
SECRETS_DIR = "/run/secrets"
#: Most secrets one node holds, and most bytes of all of them.
MAX_SECRETS = 64
MAX_TOTAL = 64 << 20
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def mount_point_type(path: str, mounts: str) -> Optional[str]:
    """
    The file system type of the mount ``path`` lies on, from the text of
    ``/proc/mounts`` (the longest mount point that contains it).
    """
    best: tuple[int, Optional[str]] = (-1, None)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best[0]:
            best = (len(point), fields[2])
    return best[1]


def _entries(header: Mapping[str, Any]) -> list[tuple[str, int, int, int, int]]:
    """``(name, size, mode, uid, gid)`` of each entry; ValueError says what is wrong."""
    raw = header.get("entries")
    if not isinstance(raw, list) or len(raw) > MAX_SECRETS:
        raise ValueError(f"entries must be a list of at most {MAX_SECRETS}")
    entries = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise ValueError("each entry must be an object")
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"bad secret name {name!r}")
        numbers: list[int] = []
        for key in ("size", "mode", "uid", "gid"):
            value = entry.get(key)
            if type(value) is not int or not 0 <= value < 2**32 or (key == "mode" and value > 0o7777):
                raise ValueError(f"bad {key} for secret {name!r}")
            numbers.append(value)
        entries.append((name, numbers[0], numbers[1], numbers[2], numbers[3]))
    if len({e[0] for e in entries}) != len(entries):
        raise ValueError("a secret is named twice")
    return entries


def _place(directory: str, name: str, data: bytes, mode: int, uid: int, gid: int) -> None:
    """Write one secret beside its final name, then rename it over that name."""
    temporary = os.path.join(directory, f".{name}.new")
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        os.unlink(temporary)
        raise
    os.close(fd)
    os.rename(temporary, os.path.join(directory, name))


class SecretsHandler(BodyHandler):
    """Places the node's secrets (see the module's description)."""

    limit = MAX_TOTAL
    #: Where the secrets go; tests point it elsewhere.
    directory = SECRETS_DIR
    #: Whether the directory must be on a tmpfs (it is refused otherwise).
    require_tmpfs = True
    #: Where the mounts are listed; tests point it elsewhere.
    mounts = "/proc/mounts"

    def start(self) -> None:
        try:
            self._wanted = _entries(self.header)
        except ValueError as error:
            self.refuse(str(error))

    def complete(self, body: bytes) -> None:
        if len(body) != sum(entry[1] for entry in self._wanted):
            self.refuse("the body's length is not the sum of the entries' sizes")
            return
        directory = self.directory
        os.makedirs(directory, mode=0o755, exist_ok=True)
        os.chmod(directory, 0o755)
        if self.require_tmpfs:
            with open(self.mounts) as stream:
                kind = mount_point_type(os.path.realpath(directory), stream.read())
            if kind != "tmpfs":
                self.refuse(f"{directory} is on {kind}, not on a tmpfs: secrets must not reach a disk")
                return
        offset = 0
        for name, size, mode, uid, gid in self._wanted:
            _place(directory, name, body[offset : offset + size], mode, uid, gid)
            offset += size
        names = {entry[0] for entry in self._wanted}
        removed = []
        for existing in sorted(os.listdir(directory)):
            if existing not in names:
                path = os.path.join(directory, existing)
                if not os.path.isdir(path) or os.path.islink(path):
                    os.unlink(path)
                    if not existing.startswith("."):
                        removed.append(existing)
        self.reply({"placed": [entry[0] for entry in self._wanted], "removed": removed})
