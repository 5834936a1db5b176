# -*- test-case-name: tests.api.test_inputs -*-
"""
The one place where HTTP input is parsed and validated, with
:mod:`.query`: JSON bodies, headers that choose a mode, and the kinds of value
several routes share (guest paths, file modes, ``wait``).

JSON bodies and headers become typed values here, or a
:class:`~vmservice.errors.BadRequest` that names what is wrong.  Query
strings are parsed by :mod:`.query` from each route's declaration.  Nothing
deeper ever sees raw request data.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import attrs

from twisted.web.iweb import IRequest

from ..errors import BadRequest
from ..nodes.model import CreateRequest, Wait
from ..nodes.transitions import Op
from ..structuring import format_path, strict_converter, structure_errors
from .models import CreateNodeRequest, FsMkdirRequest
from .query import FILE_MODE, GUEST_PATH, Choice, Duration, param

T = TypeVar("T")

#: Bodies of control requests are small; anything larger is refused.
MAX_JSON_BODY = 1 << 20

_converter = strict_converter()

#: How long ``wait`` waits when no ``timeout`` is given (the contract's 5m).
DEFAULT_WAIT = 300.0


def wait_param(answers: str) -> Any:
    """The ``wait`` parameter of routes that start a VM; ``answers`` says when they answer."""
    return param(Choice(("agent", "userdata")), f"{answers} (userdata: not supported yet, 400 not_supported)")


def timeout_param(past: str) -> Any:
    """The ``timeout`` parameter that goes with ``wait``; ``past`` says what happens past it."""
    return param(Duration(), f"How long to wait (Go duration, default 5m); past it {past}", default=DEFAULT_WAIT)


def wait(value: str | None) -> Wait:
    """
    The domain's wait for a ``wait`` parameter.

    :raise BadRequest: (``not_supported``) ``userdata``: no userdata support yet.
    """
    if value == "userdata":
        raise BadRequest("wait=userdata is not supported yet (userdata is not supported yet)", code="not_supported")
    return Wait.AGENT if value == "agent" else Wait.NONE


def structure(data: Any, cls: type[T]) -> T:
    """
    Build ``cls`` (an attrs class) from decoded JSON, strictly.

    :raise BadRequest: unknown fields, wrong types, missing fields; the
        message names the first problem and where it is.
    """
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_body")
    try:
        return _converter.structure(data, cls)
    except Exception as error:
        path, message = next(structure_errors(error), ((), str(error)))
        where = format_path(path)
        raise BadRequest(f"field {where!r}: {message}" if where else message, code="invalid_body") from None


def json_object(request: IRequest, *, empty_ok: bool = True) -> dict[str, Any]:
    """
    The request body as a JSON object; an empty body is ``{}`` when
    ``empty_ok``.

    :raise BadRequest: invalid JSON, not an object, or too large.
    """
    content = request.content
    raw = content.read(MAX_JSON_BODY + 1) if content is not None else b""
    if len(raw) > MAX_JSON_BODY:
        raise BadRequest("the body is too large", code="body_too_large")
    if not raw.strip():
        if empty_ok:
            return {}
        raise BadRequest("a JSON body is required", code="invalid_body")
    try:
        value = json.loads(raw)
    except ValueError as error:
        raise BadRequest(f"invalid JSON: {error}", code="invalid_json") from None
    if not isinstance(value, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_body")
    return value


#: The largest ``Last-Event-ID`` (Go clients send a uint64).
MAX_EVENT_ID = 2**64 - 1


def last_event_id(request: IRequest) -> int:
    """
    The ``Last-Event-ID`` header of an event stream: a decimal uint64, 0 when
    absent or empty.

    :raise BadRequest: (``invalid_header``) anything else.
    """
    raw = request.getHeader(b"last-event-id")
    text = (raw or b"").decode("latin-1").strip()
    if not text:
        return 0
    if not text.isascii() or not text.isdigit() or int(text) > MAX_EVENT_ID:
        raise BadRequest(f"Last-Event-ID must be a decimal integer 0 .. {MAX_EVENT_ID}, not {text[:40]!r}",
                         code="invalid_header")
    return int(text)


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


def fs_mkdir_request(request: IRequest) -> tuple[str, bool, int]:
    """
    Parse the JSON body of an fs mkdir: ``(path, recursive, mode)``; ``mode``
    defaults to 0755 when absent or empty.
    """
    body = structure(json_object(request, empty_ok=False), FsMkdirRequest)
    mode = 0o755 if not body.mode else FILE_MODE.parse("mode", body.mode)
    return GUEST_PATH.parse("path", body.path), bool(body.recursive), mode


def create_request(request: IRequest) -> CreateRequest:
    """
    Parse the body of a create-node request into the domain's request.

    Empty values (``""``, ``[]``, ``null``, ``0`` GPUs) of unsupported fields
    are accepted, as clients send zero values; anything else is refused.
    """
    body = structure(json_object(request), CreateNodeRequest)
    for field in attrs.fields(CreateNodeRequest):
        reason = field.metadata.get("unsupported")
        if reason is not None and getattr(body, field.name):
            raise BadRequest(f"field {field.name!r}: {reason}", code="not_supported")
    if body.gpu_count:
        raise BadRequest("field 'gpu_count': this host has no GPUs to pass through", code="limit_exceeded")
    for name in ("ram_bytes", "cpus"):
        value = getattr(body, name)
        if value is not None and value < 0:
            raise BadRequest(f"field {name!r} must not be negative", code="invalid_body")
    tags = tuple(body.tags or ())
    if any(not tag for tag in tags):
        raise BadRequest("field 'tags': tags must not be empty strings", code="invalid_body")
    return CreateRequest(
        hostname=body.hostname or None,
        ram_bytes=body.ram_bytes or None,
        cpus=body.cpus or None,
        persistent=body.persistent,
        protected=bool(body.protected),
        tags=tags,
        ip=body.ip or None,
    )


#: The media type of a tar stream.
TAR_MEDIA_TYPE = "application/x-tar"


def _media_types(request: IRequest, name: bytes) -> list[str]:
    """The media types of header ``name`` (``Content-Type`` or ``Accept``), lower case, without parameters."""
    found = []
    for raw in request.requestHeaders.getRawHeaders(name, []):
        value = raw.decode("latin-1") if isinstance(raw, bytes) else raw
        for part in value.split(","):
            media = part.split(";")[0].strip().lower()
            if media:
                found.append(media)
    return found


def cp_mode(request: IRequest, mode: str | None, header: bytes) -> str:
    """
    The copy mode: the ``mode`` query parameter, else ``tar`` when the
    ``header`` (``Content-Type`` of an upload, ``Accept`` of a download) names
    only ``application/x-tar``, else ``binary``.
    """
    if mode:
        return mode
    media = _media_types(request, header)
    return "tar" if media and all(m == TAR_MEDIA_TYPE for m in media) else "binary"


__all__ = [
    "DEFAULT_WAIT",
    "SHUTDOWN_ACTIONS",
    "cp_mode",
    "create_request",
    "fs_mkdir_request",
    "json_object",
    "shutdown_action",
    "structure",
    "timeout_param",
    "wait",
    "wait_param",
]
