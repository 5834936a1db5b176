# -*- test-case-name: tests.agent.test_adoption -*-
"""
The host's half of ``adopt`` (:mod:`vmservice.wire.adoption`): an identity as
a request, and what the guest's answer means.  The switch to the guest's new
session is the connection's business (:meth:`.client.AgentClient.adopt`).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import GuestErrorKind
from ..guestport.identity import GuestIdentity
from ..wire.adoption import AdoptionError, AdoptionRequest, encode_adoption
from .errors import AgentRequestFailed

__all__ = ["MAX_REPLY", "adoption_request", "check_prepared", "parse_answer"]

#: Largest answer accepted, in bytes.
MAX_REPLY = 4096


def adoption_request(identity: GuestIdentity) -> tuple[dict[str, Any], bytes]:
    """
    The OPEN header and body that make a guest adopt ``identity``.

    :raises ValueError: ``identity`` is not valid.
    """
    net = identity.net
    request = AdoptionRequest(
        hostname=identity.hostname,
        machine_id=identity.machine_id,
        wall_clock_ns=identity.wall_clock_ns,
        entropy=identity.entropy,
        mac=net.mac.lower() if net is not None else None,
        address=net.address if net is not None else None,
        gateway=net.gateway if net is not None else None,
    )
    try:
        return encode_adoption(request)
    except AdoptionError as error:
        raise ValueError(f"cannot adopt this identity: {error}") from None


def parse_answer(body: bytes) -> int:
    """
    The guest's wall clock before it adopted (nanoseconds since the epoch).

    :raises AgentRequestFailed: a step failed in the guest (kind
        ``ADOPTION_FAILED``), or the answer does not parse (``MALFORMED``).
    """
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise AgentRequestFailed("the adopt answer is not a JSON object", kind=GuestErrorKind.MALFORMED)
    if answer.get("error") is not None:
        step, message = answer.get("step"), answer.get("message")
        raise AgentRequestFailed(
            f"the guest could not adopt its identity (step {step}): {message}", kind=GuestErrorKind.ADOPTION_FAILED
        )
    previous = answer.get("previous_ns")
    if type(previous) is not int:
        raise AgentRequestFailed("the adopt answer has no valid 'previous_ns'", kind=GuestErrorKind.MALFORMED)
    return previous


def check_prepared(body: bytes) -> None:
    """
    Check the guest's answer to the request that only loads its handler.

    :raises AgentRequestFailed: it is not ``{"prepared": true}`` (``MALFORMED``).
    """
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get("prepared") is not True:
        raise AgentRequestFailed("the adopt answer to prepare is not {\"prepared\": true}", kind=GuestErrorKind.MALFORMED)
