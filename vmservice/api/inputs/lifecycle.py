# -*- test-case-name: tests.api.inputs.test_lifecycle -*-
"""
What starts, stops or waits for a VM: the ``wait`` and ``timeout`` parameters
and a shutdown's action.
"""

from __future__ import annotations

from typing import Any

from twisted.web.iweb import IRequest

from ...errors import BadRequest
from ...nodes.model import Wait
from ...nodes.transitions import Op
from ..query import Choice, Duration, param
from .bodies import json_object


#: How long ``wait`` waits when no ``timeout`` is given (the contract's 5m).
DEFAULT_WAIT = 300.0


def wait_param(answers: str) -> Any:
    """The ``wait`` parameter of routes that start a VM; ``answers`` says when they answer."""
    return param(Choice(("agent", "userdata")), answers)


def timeout_param(past: str) -> Any:
    """The ``timeout`` parameter that goes with ``wait``; ``past`` says what happens past it."""
    return param(Duration(), f"How long to wait (Go duration, default 5m); past it {past}", default=DEFAULT_WAIT)


def wait_for(value: str | None) -> Wait:
    """The domain's wait for a ``wait`` parameter."""
    return {"agent": Wait.AGENT, "userdata": Wait.USERDATA}.get(value or "", Wait.NONE)


#: The actions of POST /vm/{hostname}/shutdown.
SHUTDOWN_ACTIONS = ("shutdown", "reboot")


def shutdown_action(request: IRequest, action: str | None) -> Op:
    """
    The ``action`` of a shutdown: from the query (Go clients) or from a JSON
    body ``{"action": ...}`` (TypeScript clients); the query wins.  Default
    ``reboot``, as the contract says for QEMU.

    :param action: the query's ``action``, if given.
    """
    text = action or ""
    if text == "":
        value = json_object(request).get("action")
        if value is not None and not isinstance(value, str):
            raise BadRequest("action must be a string", code="invalid_action")
        text = value or ""
    if text == "":
        return Op.REBOOT
    if text not in SHUTDOWN_ACTIONS:
        raise BadRequest(f"action must be shutdown or reboot, not {text!r}", code="invalid_action")
    return Op.SHUTDOWN if text == "shutdown" else Op.REBOOT
