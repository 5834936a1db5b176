# -*- test-case-name: tests.e2b.test_store -*-
"""
:class:`SandboxStore`: the sandboxes' records (:class:`~.sandbox.Sandbox`),
one file each, ``<state_dir>/e2b/<sandbox id>.json`` (the directory 0700,
each file 0600, written atomically and durably), so that a paused sandbox
and everything its node does not know of it outlive a daemon restart.
"""

from __future__ import annotations

import json
import os

from twisted.logger import Logger

from ..durable import remove_temporaries, write_atomic
from ..private_files import private_directory
from .sandbox import SANDBOX_ID, Sandbox

log = Logger(namespace="vmservice.e2b")

#: The most bytes of one record read (metadata and environment are bounded far below it).
MAX_RECORD = 1024 * 1024


class SandboxStore:
    """
    The records in ``directory`` (made private at once).

    :raise NotPrivate: the directory is not the daemon's alone.
    """

    def __init__(self, directory: str) -> None:
        private_directory(directory)
        remove_temporaries(directory)
        self.directory = directory

    def _path(self, sandbox_id: str) -> str:
        if not SANDBOX_ID.fullmatch(sandbox_id):
            raise ValueError(f"not a sandbox id: {sandbox_id!r}")
        return os.path.join(self.directory, f"{sandbox_id}.json")

    def save(self, sandbox: Sandbox) -> None:
        """Write ``sandbox``'s record (anew)."""
        write_atomic(self._path(sandbox.sandbox_id), json.dumps(sandbox.as_json()).encode())

    def remove(self, sandbox_id: str) -> None:
        """Remove the record of ``sandbox_id``, if there is one."""
        try:
            os.unlink(self._path(sandbox_id))
        except FileNotFoundError:
            pass

    def load(self) -> list[Sandbox]:
        """Every record that reads as one (others are logged and left alone)."""
        found = []
        for name in sorted(os.listdir(self.directory)):
            stem, dot, suffix = name.partition(".")
            if suffix != "json" or not SANDBOX_ID.fullmatch(stem):
                continue
            try:
                fd = os.open(os.path.join(self.directory, name), os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as stream:
                    data = stream.read(MAX_RECORD + 1)
                if len(data) > MAX_RECORD:
                    raise ValueError("too long")
                sandbox = Sandbox.from_json(json.loads(data))
                if sandbox.sandbox_id != stem:
                    raise ValueError("named for another sandbox")
            except (OSError, ValueError) as error:
                log.warn("sandbox record {name} not read: {error}", name=name, error=str(error))
                continue
            found.append(sandbox)
        return found


__all__ = ["MAX_RECORD", "SandboxStore"]
