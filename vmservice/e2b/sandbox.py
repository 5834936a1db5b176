# -*- test-case-name: tests.e2b.test_store -*-
"""
One E2B sandbox as this daemon keeps it (pure): :class:`Sandbox`, the
record that says what a node of the fleet is as a sandbox (its template,
when it started and ends, what it does at its end, its metadata,
environment and access token), and the sandbox ids and tokens.

A sandbox's id is its node's hostname: twenty lowercase letters and
digits, the first a letter, drawn from the operating system's random
source (about 100 bits: not guessable), as E2B's look
(``i1a2b3c4d5e6f7g8h9j0``).  The record lives in a file of
:mod:`.store`, the node in the fleet; one without the other is no sandbox.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Callable, Mapping

from attrs import evolve, frozen

#: The letters of a sandbox id.
ID_LETTERS = "abcdefghijklmnopqrstuvwxyz"
ID_ALPHABET = ID_LETTERS + "0123456789"
#: The characters of a sandbox id.
ID_LENGTH = 20
#: A sandbox id, which is also a valid hostname (and a safe file name).
SANDBOX_ID = re.compile(f"[a-z][a-z0-9]{{{ID_LENGTH - 1}}}")
#: What every sandbox reports as its ``clientID`` (E2B's cloud names the machine that runs it: there is one).
CLIENT_ID = "vmservice"


class SandboxState(str, Enum):
    """A sandbox's state as E2B's API words it."""

    RUNNING = "running"
    PAUSED = "paused"


def new_sandbox_id(choice: Callable[[str], str] = secrets.choice) -> str:
    """A new sandbox id: a letter, then letters and digits, each drawn with ``choice``."""
    return choice(ID_LETTERS) + "".join(choice(ID_ALPHABET) for _ in range(ID_LENGTH - 1))


def new_access_token() -> str:
    """A new envd access token (256 random bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


@frozen
class Sandbox:
    """
    A sandbox: what its node does not know of it.

    :ivar sandbox_id: its id, its node's hostname.
    :ivar template_id: the template it was made from (a host group's id).
    :ivar group: the host group of its node.
    :ivar started_at: when it was created (UTC).
    :ivar end_at: when its timeout ends it (UTC); while paused, when it would have.
    :ivar auto_pause: paused at its end instead of killed.
    :ivar metadata: the caller's key-value pairs, in the order given.
    :ivar env_vars: the environment of every command run in it (the data plane's).
    :ivar access_token: the token its data plane asks for; empty when it was made without ``secure``.
    """

    sandbox_id: str
    template_id: str
    group: str
    started_at: datetime
    end_at: datetime
    auto_pause: bool = False
    metadata: tuple[tuple[str, str], ...] = ()
    env_vars: tuple[tuple[str, str], ...] = ()
    access_token: str = ""

    def ending(self, end_at: datetime) -> Sandbox:
        """The same sandbox, ending at ``end_at``."""
        return evolve(self, end_at=end_at)

    def as_json(self) -> dict[str, Any]:
        """The record as the store writes it."""
        return {
            "sandbox_id": self.sandbox_id, "template_id": self.template_id, "group": self.group,
            "started_at": self.started_at.isoformat(), "end_at": self.end_at.isoformat(),
            "auto_pause": self.auto_pause, "metadata": dict(self.metadata), "env_vars": dict(self.env_vars),
            "access_token": self.access_token,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sandbox:
        """
        The record the store wrote as ``data``.

        :raise ValueError: ``data`` is no such record.
        """
        try:
            texts = {key: data[key] for key in ("sandbox_id", "template_id", "group", "access_token")}
            if not all(isinstance(value, str) for value in texts.values()) or not isinstance(data["auto_pause"], bool):
                raise ValueError("a field of the wrong type")
            if not SANDBOX_ID.fullmatch(texts["sandbox_id"]):
                raise ValueError("a bad sandbox id")
            return cls(
                started_at=_utc(data["started_at"]), end_at=_utc(data["end_at"]), auto_pause=data["auto_pause"],
                metadata=_pairs(data["metadata"]), env_vars=_pairs(data["env_vars"]), **texts,
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"not a sandbox record ({error!r})") from None


@frozen
class SandboxView:
    """
    A sandbox as the API shows it: its record, its state, and its node's size.

    :ivar cpu_count: its node's vCPUs.
    :ivar memory_mb: its node's RAM in MiB.
    :ivar disk_size_mb: its node's disk in MiB.
    """

    sandbox: Sandbox
    state: SandboxState
    cpu_count: int
    memory_mb: int
    disk_size_mb: int


def _utc(text: object) -> datetime:
    if not isinstance(text, str):
        raise ValueError("a time that is not text")
    stamp = datetime.fromisoformat(text)
    return stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp.astimezone(timezone.utc)


def _pairs(mapping: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise ValueError("a mapping that is not of text to text")
    return tuple(mapping.items())


__all__ = ["CLIENT_ID", "SANDBOX_ID", "Sandbox", "SandboxState", "SandboxView", "new_access_token", "new_sandbox_id"]
