# -*- test-case-name: tests.api.test_inputs -*-
"""
The one place where HTTP input is parsed and validated.

Query parameters, JSON bodies and path values become typed values here, or a
:class:`~vmservice.errors.BadRequest` that names what is wrong.  Nothing
deeper ever sees raw request data.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar


from twisted.web.iweb import IRequest

from attrs import frozen

from ..agent.copying import DownloadRequest, UploadRequest
from ..agent.execution import ExecRequest
from ..durations import parse_go_duration
from ..errors import BadRequest
from ..structuring import format_path, strict_converter, structure_errors
from ..nodes.fleet import CreateRequest
from .models import CreateNodeRequest, FsMkdirRequest

T = TypeVar("T")

#: Bodies of control requests are small; anything larger is refused.
MAX_JSON_BODY = 1 << 20

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}


_converter = strict_converter()


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


def query(request: IRequest, name: str) -> str | None:
    """The last value of query parameter ``name`` as text, or ``None``."""
    values = (request.args or {}).get(name.encode())
    if not values:
        return None
    try:
        return values[-1].decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"query parameter {name!r} is not valid UTF-8", code="invalid_query") from None


def query_int(request: IRequest, name: str, default: int, *, minimum: int | None = None) -> int:
    """Query parameter ``name`` as an integer (``default`` when absent or empty)."""
    text = query(request, name)
    if text is None or text == "":
        return default
    try:
        value = int(text, 10)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be an integer, not {text!r}", code="invalid_query") from None
    if minimum is not None and value < minimum:
        raise BadRequest(f"query parameter {name!r} must be at least {minimum}", code="invalid_query")
    return value


def truthy(text: str) -> bool:
    """Whether ``text`` says true (``true``, ``1``, ``yes``, any case) as a boolean query value."""
    return text.lower() in _TRUE


def query_bool(request: IRequest, name: str, default: bool = False) -> bool:
    """Query parameter ``name`` as a boolean: true/false/1/0/yes/no."""
    text = query(request, name)
    if text is None:
        return default
    lowered = text.lower()
    if truthy(lowered):
        return True
    if lowered in _FALSE:
        return False
    raise BadRequest(f"query parameter {name!r} must be true or false, not {text!r}", code="invalid_query")


def query_choice(request: IRequest, name: str, choices: tuple[str, ...]) -> str | None:
    """Query parameter ``name``, which must be one of ``choices`` (empty = absent)."""
    text = query(request, name)
    if text is None or text == "":
        return None
    if text not in choices:
        raise BadRequest(
            f"query parameter {name!r} must be one of {', '.join(choices)}, not {text!r}", code="invalid_query"
        )
    return text


def query_duration(request: IRequest, name: str, default: float) -> float:
    """Query parameter ``name`` as a Go duration (``30s``, ``2m``, ``1m30s``) in seconds."""
    text = query(request, name)
    if text is None or text == "":
        return default
    try:
        seconds = parse_go_duration(text)
    except ValueError as error:
        raise BadRequest(f"query parameter {name!r}: {error}", code="invalid_query") from None
    if seconds <= 0:
        raise BadRequest(f"query parameter {name!r} must be positive", code="invalid_query")
    return seconds


#: How long ``wait`` waits when no ``timeout`` is given (the contract's 5m).
DEFAULT_WAIT = 300.0


def wait_params(request: IRequest) -> tuple[str | None, float]:
    """
    ``wait`` and ``timeout`` of create, restore and relaunch: ``wait`` is
    ``agent`` or absent (``userdata`` is refused: no userdata support yet),
    ``timeout`` a Go duration, 5m by default.
    """
    wait = query_choice(request, "wait", ("agent", "userdata"))
    if wait == "userdata":
        raise BadRequest("wait=userdata is not supported yet (userdata is not supported yet)", code="not_supported")
    return wait, query_duration(request, "timeout", DEFAULT_WAIT)


#: The actions of POST /vm/{hostname}/shutdown.
SHUTDOWN_ACTIONS = ("shutdown", "reboot")


def shutdown_action(request: IRequest) -> str:
    """
    The ``action`` of a shutdown: from the query (Go clients) or from a JSON
    body ``{"action": ...}`` (TypeScript clients); the query wins.  Default
    ``reboot``, as the contract says for QEMU.
    """
    text = query(request, "action")
    if text is None or text == "":
        value = json_object(request).get("action")
        if value is not None and not isinstance(value, str):
            raise BadRequest("action must be a string", code="invalid_action")
        text = value or ""
    if text == "":
        return "reboot"
    if text not in SHUTDOWN_ACTIONS:
        raise BadRequest(f"action must be shutdown or reboot, not {text!r}", code="invalid_action")
    return text


#: Octal text of a file mode: 1 to 4 digits after an optional ``0`` or ``0o``.
_OCTAL_MODE = re.compile(r"(?:0o|0(?=[0-7]))?([0-7]{1,4})")


def octal_mode(text: str, name: str = "mode") -> int:
    """
    Parse a file mode given as octal text (``0755``, ``755``, ``0o755``, ``4755``)
    into its bits, at most ``0o7777``.

    :raise BadRequest: anything else (``invalid mode: <text>``, as clients expect).
    """
    match = _OCTAL_MODE.fullmatch(text)
    if match is None:
        raise BadRequest(f"invalid mode: {text} ({name} must be octal text such as 0755)", code="invalid_mode")
    return int(match.group(1), 8)


def guest_path(text: str | None, name: str = "path") -> str:
    """
    A path inside a guest: absolute, or ``~`` / ``~/...`` for root's home
    directory (expanded by the guest).

    :raise BadRequest: missing, empty, relative, ``~user``, or containing NUL.
    """
    if text is None or text == "":
        raise BadRequest(f"{name!r} is required", code="invalid_path")
    if "\x00" in text:
        raise BadRequest(f"{name!r} must not contain NUL", code="invalid_path")
    if not (text.startswith("/") or text == "~" or text.startswith("~/")):
        raise BadRequest(f"{name!r} must be an absolute path (or start with ~/), not {text!r}", code="invalid_path")
    return text


def fs_mkdir_request(request: IRequest) -> tuple[str, bool, int]:
    """
    Parse the JSON body of an fs mkdir: ``(path, recursive, mode)``; ``mode``
    defaults to 0755 when absent or empty.
    """
    body = structure(json_object(request, empty_ok=False), FsMkdirRequest)
    mode = 0o755 if not body.mode else octal_mode(body.mode)
    return guest_path(body.path), bool(body.recursive), mode


#: CreateNodeRequest fields the daemon does not support yet, with the reason.
_UNSUPPORTED = {
    "disk_image": "only the host group's image is supported",
    "import_user": "importing users is not supported",
    "ssh_keys": "SSH keys are not supported (use exec or shell through the agent)",
    "userdata": "userdata is not supported yet",
    "secrets": "secrets are not supported yet",
    "pci_devices": "PCI passthrough is not supported",
    "codehost_user": "importing keys from a code host is not supported",
    "network": "per-node network policy is not supported yet",
}


def create_request(request: IRequest) -> CreateRequest:
    """
    Parse the body of a create-node request into the domain's request.

    Empty values (``""``, ``[]``, ``null``, ``0`` GPUs) of unsupported fields
    are accepted, as clients send zero values; anything else is refused.
    """
    body = structure(json_object(request), CreateNodeRequest)
    for name, reason in _UNSUPPORTED.items():
        if getattr(body, name):
            raise BadRequest(f"field {name!r}: {reason}", code="not_supported")
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


def query_list(request: IRequest, name: str) -> list[str]:
    """Every value of a repeated query parameter ``name``, in order."""
    values = (request.args or {}).get(name.encode()) or []
    try:
        return [value.decode("utf-8") for value in values]
    except UnicodeDecodeError:
        raise BadRequest(f"query parameter {name!r} is not valid UTF-8", code="invalid_query") from None


#: uid/gid value that existing clients send for "not set".
UNSET_ID = 4294967295


def _query_id(request: IRequest, name: str) -> int:
    """A uid/gid: 0 .. 2^32-2; absent, empty or 4294967295 (not set) mean 0."""
    text = query(request, name)
    if text is None or text == "":
        return 0
    if not text.isdigit() or not text.isascii():
        raise BadRequest(f"query parameter {name!r} must be an integer 0 .. 4294967295, not {text!r}", code="invalid_query")
    value = int(text)
    if value > UNSET_ID:
        raise BadRequest(f"query parameter {name!r} must be at most 4294967295", code="invalid_query")
    return 0 if value == UNSET_ID else value


@frozen
class ExecParams:
    """
    A parsed exec request.

    :ivar request: what to run.
    :ivar base64: ``stdio=base64``: payloads are base64 of the exact bytes.
    :ivar buffered: one ExecResult instead of a stream.
    """

    request: ExecRequest
    base64: bool
    buffered: bool


def exec_params(request: IRequest) -> ExecParams:
    """
    Parse the query of ``POST /vm/{hostname}/exec`` (see docs/api.md).

    ``permissions`` is the process's umask in octal (``022``, ``0027``);
    ``shell`` absent means ``/bin/bash`` and empty means no shell.
    """
    cmd = query(request, "cmd")
    if not cmd:
        raise BadRequest("query parameter 'cmd' is required", code="invalid_query")
    if "\x00" in cmd:
        raise BadRequest("query parameter 'cmd' must not contain NUL", code="invalid_query")
    args = query_list(request, "args")
    env = query_list(request, "env")
    for entry in env:
        key, sep, _ = entry.partition("=")
        if not sep or not key:
            raise BadRequest(f"query parameter 'env' must be KEY=VALUE, not {entry!r}", code="invalid_query")
    if any("\x00" in word for word in args + env):
        raise BadRequest("query parameters 'args' and 'env' must not contain NUL", code="invalid_query")
    permissions = query(request, "permissions")
    umask = None
    if permissions:
        try:
            umask = int(permissions, 8)
        except ValueError:
            umask = -1
        if not 0 <= umask <= 0o777:
            raise BadRequest(
                f"query parameter 'permissions' must be an octal umask 0 .. 0777, not {permissions!r}",
                code="invalid_query",
            )
    shell = query(request, "shell")
    stdio = query_choice(request, "stdio", ("text", "base64")) or "text"
    buffered = query_bool(request, "buffered")
    return ExecParams(
        request=ExecRequest(
            cmd=cmd,
            args=tuple(args),
            env=tuple(env),
            uid=_query_id(request, "uid"),
            gid=_query_id(request, "gid"),
            cwd=query(request, "cwd") or "",
            shell="/bin/bash" if shell is None else shell,
            umask=umask,
            stdin=query_bool(request, "stdin"),
            stdout=query_bool(request, "stdout", True),
            stderr=query_bool(request, "stderr", True),
        ),
        base64=stdio == "base64",
        buffered=buffered,
    )


#: The copy modes of ``/vm/{hostname}/cp``.
CP_MODES = ("binary", "tar")
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


def cp_mode(request: IRequest, header: bytes) -> str:
    """
    The copy mode: the ``mode`` query parameter, else ``tar`` when the
    ``header`` (``Content-Type`` of an upload, ``Accept`` of a download) names
    only ``application/x-tar``, else ``binary``.

    :raise BadRequest: ``invalid mode: <m>`` for anything else, including the
        ``cp-v1-*`` modes (clients fall back to binary/tar on exactly that text).
    """
    text = query(request, "mode")
    if text:
        if text not in CP_MODES:
            raise BadRequest(f"invalid mode: {text} (supported: binary, tar)", code="invalid_mode")
        return text
    media = _media_types(request, header)
    return "tar" if media and all(m == TAR_MEDIA_TYPE for m in media) else "binary"


def _optional_id(request: IRequest, name: str) -> int | None:
    """A uid/gid that may be left out: absent, empty or 4294967295 mean ``None``."""
    text = query(request, name)
    if text is None or text == "":
        return None
    value = _query_id(request, name)
    return None if text == str(UNSET_ID) else value


def cp_upload_request(request: IRequest) -> UploadRequest:
    """
    Parse the query of ``POST /vm/{hostname}/cp``: ``path`` (required), ``mode``
    (or ``Content-Type``), ``uid``, ``gid``, ``permissions`` (octal).
    """
    path = guest_path(query(request, "path"))
    mode = cp_mode(request, b"content-type")
    permissions = query(request, "permissions")
    return UploadRequest(
        path=path,
        mode=mode,
        uid=_optional_id(request, "uid"),
        gid=_optional_id(request, "gid"),
        permissions=octal_mode(permissions, "permissions") if permissions else None,
    )


def cp_download_request(request: IRequest) -> DownloadRequest:
    """Parse the query of ``GET /vm/{hostname}/cp``: ``path`` and ``mode`` (or ``Accept``)."""
    path = guest_path(query(request, "path"))
    return DownloadRequest(path=path, mode=cp_mode(request, b"accept"))


__all__ = [
    "CP_MODES",
    "ExecParams",
    "cp_download_request",
    "cp_mode",
    "cp_upload_request",
    "exec_params",
    "query_list",
    "create_request",
    "fs_mkdir_request",
    "guest_path",
    "octal_mode",
    "json_object",
    "query",
    "query_bool",
    "query_choice",
    "query_duration",
    "query_int",
    "structure",
]
