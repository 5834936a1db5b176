# -*- test-case-name: tests.cluster.kubelet.test_status -*-
"""
Kubernetes ``Status`` objects (``metav1.Status``), the body of every error the
kubelet API answers and of an exec's end on its status channel.

An exec's end is what kubectl reads from channel 3: ``Success``, or
``Failure`` with reason ``NonZeroExitCode`` and the exit code as the message
of the one cause of reason ``ExitCode`` (kubectl turns that into its own exit
code); any other ``Failure`` is an error kubectl prints.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from ...errors import ServiceError

#: The ``reason`` of each HTTP status the kubelet API answers (metav1.StatusReason).
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    500: "InternalError",
    501: "NotImplemented",
    503: "ServiceUnavailable",
}


def _encode(fields: dict[str, Any]) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, **fields},
                      separators=(",", ":")).encode()


def failure(code: int, message: str, reason: Optional[str] = None) -> bytes:
    """A ``Failure`` Status with HTTP status ``code`` (its reason from :data:`REASONS` unless given)."""
    return _encode({"status": "Failure", "message": message,
                    "reason": reason or REASONS.get(code, "InternalError"), "code": code})


def from_error(error: ServiceError) -> tuple[int, bytes]:
    """The HTTP status and Status body of a service error."""
    return error.status, failure(error.status, error.message)


def exec_success() -> bytes:
    """An exec's end: the command exited 0."""
    return _encode({"status": "Success"})


def exec_exit(exit_code: int, message: str) -> bytes:
    """An exec's end: the command exited ``exit_code`` (not 0), as kubectl parses it."""
    return _encode({
        "status": "Failure",
        "message": message,
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
    })


def exec_ended(exit_code: int, signal: Optional[str]) -> bytes:
    """An exec's end from the guest's exit record: Success for 0, else NonZeroExitCode (1 for a signal alone)."""
    if exit_code == 0 and signal is None:
        return exec_success()
    code = exit_code or 1
    why = f"killed by {signal}" if signal else f"exit code {code}"
    return exec_exit(code, f"command terminated with non-zero exit code: {why}")


def exec_error(message: str) -> bytes:
    """An exec's end: it was lost or never ran (no exit code to give)."""
    return _encode({"status": "Failure", "message": message, "reason": "InternalError", "code": 500})


__all__ = ["REASONS", "exec_ended", "exec_error", "exec_exit", "exec_success", "failure", "from_error"]
