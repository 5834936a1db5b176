# -*- test-case-name: tests.agent.test_provisioning -*-
"""
The requests that make a guest the node it was asked to be: its secrets
(``secrets``), its login user and SSH keys (``login``) and its userdata
(``userdata``).  Each is one stream: a JSON header (a record of
:mod:`vmservice.wire.openheaders.provisioning`), a body, one JSON answer
(see ``docs/agent-protocol.md`` and the guest's modules of the same names).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..errors import GuestErrorKind
from ..guestport.guest import GuestSecret, LoginOutcome, UserdataOutcome
from ..wire.openheaders.provisioning import LoginHeader, SecretEntry, SecretsHeader, UserdataHeader
from .channel import Channel
from .errors import AgentRequestFailed

__all__ = ["login", "place_secrets", "run_userdata"]

#: Largest answer of these requests, in bytes.
MAX_REPLY = 64 * 1024


def _object(body: bytes, what: str) -> Mapping[str, Any]:
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise AgentRequestFailed(f"the {what} answer is not a JSON object", kind=GuestErrorKind.MALFORMED)
    return answer


async def place_secrets(channel: Channel, secrets: tuple[GuestSecret, ...]) -> tuple[str, ...]:
    """Make the guest's ``/run/secrets`` hold exactly ``secrets``; the names removed."""
    header = SecretsHeader(tuple(SecretEntry(s.name, len(s.data), s.mode, s.uid, s.gid) for s in secrets)).to_json()
    answer = _object(await channel.request(header, MAX_REPLY, b"".join(s.data for s in secrets)), "secrets")
    removed = answer.get("removed")
    if not isinstance(removed, list) or not all(isinstance(name, str) for name in removed):
        raise AgentRequestFailed("the secrets answer has no valid 'removed'", kind=GuestErrorKind.MALFORMED)
    return tuple(removed)


async def run_userdata(channel: Channel, script: bytes) -> UserdataOutcome:
    """Run the guest's userdata unless it ran before; its outcome, once it is over."""
    answer = _object(await channel.request(UserdataHeader(len(script)).to_json(), MAX_REPLY, script), "userdata")
    state, exit_code = answer.get("state"), answer.get("exit_code")
    if state not in ("finished", "interrupted") or not (exit_code is None or type(exit_code) is int):
        raise AgentRequestFailed("the userdata answer has no valid 'state' or 'exit_code'", kind=GuestErrorKind.MALFORMED)
    return UserdataOutcome(state=state, exit_code=exit_code, ran_script=bool(answer.get("ran_script", True)))


async def login(channel: Channel, user: str, keys: tuple[str, ...]) -> LoginOutcome:
    """Make the login user, install its keys and start the SSH server when there are keys."""
    body = "".join(f"{key}\n" for key in keys).encode("utf-8")
    answer = _object(await channel.request(LoginHeader(user).to_json(), MAX_REPLY, body), "login")
    try:
        return LoginOutcome(user=str(answer["user"]), uid=int(answer["uid"]), home=str(answer["home"]),
                            created=bool(answer["created"]), sshd=str(answer["sshd"]))
    except (KeyError, TypeError, ValueError):
        raise AgentRequestFailed("the login answer is incomplete", kind=GuestErrorKind.MALFORMED) from None
