# -*- test-case-name: tests.guest.test_secrets -*-
"""
The node's secrets in the guest: files in ``/run/secrets``, a tmpfs, so their
content never reaches the node's disk.

``{"op": "secrets", "entries": [{"name", "size", "mode", "uid", "gid"}, ...]}``
(:class:`~vmservice.wire.openheaders.provisioning.SecretsHeader`), then the contents of the entries one after the other as the body: afterwards
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
from typing import Any, Mapping, Optional

from vmservice.guest.bodies import RecordBodyHandler
from vmservice.wire.openheaders.provisioning import MAX_SECRETS, SecretsHeader

__all__ = ["MAX_SECRETS", "SECRETS_DIR", "SecretsHandler", "mount_point_type"]

#: Where secrets are placed.
SECRETS_DIR = "/run/secrets"
#: Most bytes of all the secrets of a node (at most :data:`MAX_SECRETS` of them).
MAX_TOTAL = 64 << 20


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


class SecretsHandler(RecordBodyHandler[SecretsHeader]):
    """Places the node's secrets (see the module's description)."""

    limit = MAX_TOTAL
    #: Where the secrets go; tests point it elsewhere.
    directory = SECRETS_DIR
    #: Whether the directory must be on a tmpfs (it is refused otherwise).
    require_tmpfs = True
    #: Where the mounts are listed; tests point it elsewhere.
    mounts = "/proc/mounts"

    def read(self, header: Mapping[str, Any]) -> SecretsHeader:
        return SecretsHeader.from_json(header)

    def complete(self, body: bytes) -> None:
        if len(body) != self.request.size:
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
        for entry in self.request.entries:
            _place(directory, entry.name, body[offset : offset + entry.size], entry.mode, entry.uid, entry.gid)
            offset += entry.size
        names = {entry.name for entry in self.request.entries}
        removed = []
        for existing in sorted(os.listdir(directory)):
            if existing not in names:
                path = os.path.join(directory, existing)
                if not os.path.isdir(path) or os.path.islink(path):
                    os.unlink(path)
                    if not existing.startswith("."):
                        removed.append(existing)
        self.reply({"placed": [entry.name for entry in self.request.entries], "removed": removed})
