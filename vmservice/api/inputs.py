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

import base64
import binascii
import json
import re
from typing import Any, TypeVar

import attrs

from twisted.web.iweb import IRequest

from ..codehost import CODEHOST_USER_PATTERN
from ..errors import BadRequest
from ..config import MAX_USERDATA
from ..devices.pci import MAX_NODE_DEVICES, normalise_address
from ..nodes.model import (LOGIN_USER_PATTERN, MAX_NODE_SECRETS, MAX_SSH_KEYS, MAX_TAGS,
                           SECRET_NAME_PATTERN, CreateRequest, Wait, tag_problem, unique)
from ..nodes.tagging import TagEdit
from ..nodes.transitions import Op
from ..sshkeys import InvalidPublicKey, parse_public_key
from ..structuring import format_path, strict_converter, structure_errors
from ..secretstore import DEFAULT_PERMISSIONS, MAX_SECRET_SIZE, SecretChange, SecretSpec
from .models.background import KillRequest
from .models.files import FsMkdirRequest
from .models.nodes import CreateNodeRequest, TagsUpdate
from .models.secrets import CreateSecretRequest, UpdateSecretRequest
from .query import FILE_MODE, GUEST_PATH, Choice, Duration, param

T = TypeVar("T")

#: Bodies of control requests are small; anything larger is refused.
MAX_JSON_BODY = 1 << 20

_converter = strict_converter()

#: How long ``wait`` waits when no ``timeout`` is given (the contract's 5m).
DEFAULT_WAIT = 300.0


def wait_param(answers: str) -> Any:
    """The ``wait`` parameter of routes that start a VM; ``answers`` says when they answer."""
    return param(Choice(("agent", "userdata")), answers)


def timeout_param(past: str) -> Any:
    """The ``timeout`` parameter that goes with ``wait``; ``past`` says what happens past it."""
    return param(Duration(), f"How long to wait (Go duration, default 5m); past it {past}", default=DEFAULT_WAIT)


def wait(value: str | None) -> Wait:
    """The domain's wait for a ``wait`` parameter."""
    return {"agent": Wait.AGENT, "userdata": Wait.USERDATA}.get(value or "", Wait.NONE)


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


def json_object(request: IRequest, *, empty_ok: bool = True, limit: int = MAX_JSON_BODY) -> dict[str, Any]:
    """
    The request body as a JSON object; an empty body is ``{}`` when
    ``empty_ok``.

    :param limit: the most bytes of body accepted.
    :raise BadRequest: invalid JSON, not an object, or too large.
    """
    content = request.content
    raw = content.read(limit + 1) if content is not None else b""
    if len(raw) > limit:
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


#: The signals a background exec's kill sends, by name without ``SIG``.
KILL_SIGNALS = ("TERM", "KILL", "HUP", "INT", "QUIT", "USR1", "USR2")
#: Milliseconds from a terminating signal to ``KILL`` when the kill body gives none.
DEFAULT_GRACE_MS = 5000


def kill_request(request: IRequest) -> tuple[str, int]:
    """
    The optional JSON body of a background exec's kill: ``(signal, grace_ms)``,
    ``TERM`` and 5000 by default (an empty body is the defaults).
    """
    body = structure(json_object(request), KillRequest)
    name = (body.signal or "TERM").upper()
    name = name[3:] if name.startswith("SIG") else name
    if name not in KILL_SIGNALS:
        raise BadRequest(f"field 'signal' must be one of {', '.join(KILL_SIGNALS)}, not {body.signal!r}",
                         code="invalid_body")
    grace_ms = DEFAULT_GRACE_MS if body.grace_ms is None else body.grace_ms
    if not 0 <= grace_ms <= 3_600_000:
        raise BadRequest("field 'grace_ms' must be 0 .. 3600000", code="invalid_body")
    return name, grace_ms
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


def resume_after(request: IRequest, query_id: int | None) -> int | None:
    """
    Where an event stream that can replay resumes: after the id of the
    ``last_event_id`` query (for clients that cannot set headers), else of
    the ``Last-Event-ID`` header; ``None`` when neither is given (only new
    events).

    :raise BadRequest: (``invalid_header``) a header that is not a decimal uint64.
    """
    if query_id is not None:
        return query_id
    if not (request.getHeader(b"last-event-id") or b"").strip():
        return None
    return last_event_id(request)


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

    Empty values (``""``, ``[]``, ``null``) of unsupported fields are
    accepted, as clients send zero values; anything else is refused.  PCI
    addresses are checked for their syntax here and against the host when
    the node is made.
    """
    body = structure(json_object(request), CreateNodeRequest)
    for field in attrs.fields(CreateNodeRequest):
        reason = field.metadata.get("unsupported")
        if reason is not None and getattr(body, field.name):
            raise BadRequest(f"field {field.name!r}: {reason}", code="not_supported")
    for name in ("ram_bytes", "cpus", "gpu_count"):
        value = getattr(body, name)
        if value is not None and value < 0:
            raise BadRequest(f"field {name!r} must not be negative", code="invalid_body")
    if (body.gpu_count or 0) > MAX_NODE_DEVICES:
        raise BadRequest(f"field 'gpu_count': at most {MAX_NODE_DEVICES}", code="too_many_pci_devices")
    tags = _tags("tags", body.tags or [])
    return CreateRequest(
        hostname=body.hostname or None,
        ram_bytes=body.ram_bytes or None,
        cpus=body.cpus or None,
        persistent=body.persistent,
        protected=bool(body.protected),
        tags=tags,
        ip=body.ip or None,
        userdata=_userdata(body.userdata or ""),
        secrets=_secret_names(body.secrets or []),
        ssh_keys=_ssh_keys(body.ssh_keys or []),
        import_user=_login_user(body.import_user or "") or None,
        codehost_user=_codehost_user(body.codehost_user or "") or None,
        pci_devices=_pci_devices(body.pci_devices or []),
        gpu_count=body.gpu_count or 0,
        disk_image=body.disk_image or None,
    )


def _pci_devices(addresses: list[str]) -> tuple[str, ...]:
    """:raise BadRequest: (``invalid_pci_address``) one is not a PCI address; (``too_many_pci_devices``)."""
    if len(addresses) > MAX_NODE_DEVICES:
        raise BadRequest(f"field 'pci_devices': at most {MAX_NODE_DEVICES} devices", code="too_many_pci_devices")
    found = []
    for index, address in enumerate(addresses):
        try:
            found.append(normalise_address(address))
        except BadRequest as error:
            raise BadRequest(f"field 'pci_devices[{index}]': {error.message}", code=error.code) from None
    return unique(found)


def _userdata(script: str) -> str:
    """:raise BadRequest: (``userdata_too_large``) more than MAX_USERDATA bytes."""
    size = len(script.encode("utf-8"))
    if size > MAX_USERDATA:
        raise BadRequest(f"field 'userdata' is {size} bytes; at most {MAX_USERDATA} are allowed", code="userdata_too_large")
    return script


def _secret_names(names: list[str]) -> tuple[str, ...]:
    """:raise BadRequest: (``invalid_body``) too many, or one that cannot be a secret's name."""
    if len(names) > MAX_NODE_SECRETS:
        raise BadRequest(f"field 'secrets': at most {MAX_NODE_SECRETS} secrets", code="invalid_body")
    for index, name in enumerate(names):
        if not re.fullmatch(SECRET_NAME_PATTERN, name):
            raise BadRequest(f"field 'secrets[{index}]': {name[:64]!r} is not a secret's name", code="invalid_body")
    return unique(names)


def _ssh_keys(keys: list[str]) -> tuple[str, ...]:
    """
    The keys, each as its normalised line (:func:`~vmservice.sshkeys.parse_public_key`), once.

    :raise BadRequest: (``invalid_ssh_key``) too many, or one that is not an
        accepted OpenSSH public key line; the message names its index.
    """
    if len(keys) > MAX_SSH_KEYS:
        raise BadRequest(f"field 'ssh_keys': at most {MAX_SSH_KEYS} keys", code="invalid_ssh_key")
    lines = []
    for index, key in enumerate(keys):
        try:
            lines.append(parse_public_key(key).line())
        except InvalidPublicKey as error:
            raise BadRequest(f"field 'ssh_keys[{index}]' is not an OpenSSH public key: {error}",
                             code="invalid_ssh_key") from None
    return unique(lines)


def _codehost_user(name: str) -> str:
    """:raise BadRequest: (``invalid_codehost_user``) not a code-host user name."""
    if name and not re.fullmatch(CODEHOST_USER_PATTERN, name):
        raise BadRequest(f"field 'codehost_user': {name[:64]!r} is not a code-host user name "
                         "(letters, digits and single hyphens inside, at most 39)", code="invalid_codehost_user")
    return name


def _login_user(name: str) -> str:
    """:raise BadRequest: (``invalid_import_user``) not a user name."""
    if name and not re.fullmatch(LOGIN_USER_PATTERN, name):
        raise BadRequest(f"field 'import_user': {name[:64]!r} is not a user name ({LOGIN_USER_PATTERN})",
                         code="invalid_import_user")
    return name


def _tags(name: str, tags: list[str]) -> tuple[str, ...]:
    """
    The tags of field ``name``, each once, in their order.

    :raise BadRequest: (``invalid_body``) more than MAX_TAGS, or a tag that
        is not one (:func:`~vmservice.nodes.model.tag_problem`).
    """
    if len(tags) > MAX_TAGS:
        raise BadRequest(f"field {name!r}: at most {MAX_TAGS} tags", code="invalid_body")
    for index, tag in enumerate(tags):
        problem = tag_problem(tag)
        if problem is not None:
            raise BadRequest(f"field '{name}[{index}]': {problem}", code="invalid_body")
    return unique(tags)


def tag_edit(request: IRequest) -> TagEdit:
    """
    Parse the body of a tag change: ``{"replace": [...]}``, or ``{"add": [...]}``
    and/or ``{"remove": [...]}``.

    :raise BadRequest: (``invalid_body``) none of them, ``replace`` with
        another, a tag both added and removed, or a bad tag.
    """
    body = structure(json_object(request, empty_ok=False), TagsUpdate)
    if body.add is None and body.remove is None and body.replace is None:
        raise BadRequest("one of 'add', 'remove' or 'replace' is required", code="invalid_body")
    if body.replace is not None:
        if body.add is not None or body.remove is not None:
            raise BadRequest("'replace' cannot be combined with 'add' or 'remove'", code="invalid_body")
        return TagEdit(replace=_tags("replace", body.replace))
    add, remove = _tags("add", body.add or []), _tags("remove", body.remove or [])
    both = [tag for tag in add if tag in remove]
    if both:
        raise BadRequest(f"tag {both[0]!r} is both added and removed", code="invalid_body")
    return TagEdit(add=add, remove=remove)


#: The largest body of a secret's create or update: its content in base64, and room for the rest.
MAX_SECRET_BODY = (MAX_SECRET_SIZE + 2) // 3 * 4 + 64 * 1024


def _secret_content(raw: dict[str, Any]) -> bytes | None:
    """
    The decoded ``data`` of a secret's body, taken out of ``raw``; ``None``
    when absent.  No message ever quotes the value: it is a secret.

    :raise BadRequest: (``invalid_body``) not a string; (``invalid_base64``)
        not standard base64 (line breaks and blanks are ignored);
        (``secret_too_large``) more than MAX_SECRET_SIZE bytes once decoded.
    """
    value = raw.pop("data", None)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest("field 'data' must be a string (the content in base64)", code="invalid_body")
    text = "".join(value.split())
    if len(text) > MAX_SECRET_BODY:
        raise BadRequest(f"field 'data' holds more than {MAX_SECRET_SIZE} bytes", code="secret_too_large")
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise BadRequest("field 'data' is not valid base64", code="invalid_base64") from None
    if len(data) > MAX_SECRET_SIZE:
        raise BadRequest(f"field 'data' holds {len(data)} bytes; at most {MAX_SECRET_SIZE} are allowed",
                         code="secret_too_large")
    return data


def _secret_permissions(text: str | None) -> int | None:
    """:raise BadRequest: (``invalid_body``) not octal permission bits up to 0777."""
    if text is None:
        return None
    if not re.fullmatch("0?[0-7]{1,3}", text):
        raise BadRequest(f"field 'permissions' must be octal permission bits such as 0400 (at most 0777), "
                         f"not {text[:16]!r}", code="invalid_body")
    return int(text, 8)


def _secret_id(name: str, value: int | None) -> int | None:
    """:raise BadRequest: (``invalid_body``) not a uid or gid."""
    if value is not None and not 0 <= value <= 2**32 - 2:
        raise BadRequest(f"field {name!r} must be 0 .. {2**32 - 2}", code="invalid_body")
    return value


def secret_create(request: IRequest) -> SecretSpec:
    """
    Parse the body of ``POST /secrets``: a name, ``data`` in base64, and
    optional ``permissions`` (octal text, default 0600), ``uid`` and ``gid``
    (default 0).

    :raise BadRequest: what is wrong (never quoting the content); a bad
        name is the store's to say.
    """
    raw = json_object(request, empty_ok=False, limit=MAX_SECRET_BODY)
    data = _secret_content(raw)
    if data is None:
        raise BadRequest("field 'data' is required (the content in base64)", code="invalid_body")
    body = structure({**raw, "data": ""}, CreateSecretRequest)
    permissions = _secret_permissions(body.permissions)
    return SecretSpec(
        name=body.name,
        data=data,
        permissions=DEFAULT_PERMISSIONS if permissions is None else permissions,
        uid=_secret_id("uid", body.uid) or 0,
        gid=_secret_id("gid", body.gid) or 0,
    )


def secret_update(request: IRequest) -> SecretChange:
    """
    Parse the body of ``PATCH /secrets/{name}``: any of ``data`` (base64),
    ``permissions``, ``uid`` and ``gid``; absent or ``null`` ones stay as
    they are (an empty body changes nothing).

    :raise BadRequest: what is wrong (never quoting the content).
    """
    raw = json_object(request, limit=MAX_SECRET_BODY)
    data = _secret_content(raw)
    body = structure(raw, UpdateSecretRequest)
    return SecretChange(
        data=data,
        permissions=_secret_permissions(body.permissions),
        uid=_secret_id("uid", body.uid),
        gid=_secret_id("gid", body.gid),
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
    The legacy copy mode: the ``mode`` query parameter, else ``tar`` when the
    ``header`` (``Content-Type`` of an upload, ``Accept`` of a download) names
    only ``application/x-tar``, else ``binary``.
    """
    if mode:
        return mode
    media = _media_types(request, header)
    return "tar" if media and all(m == TAR_MEDIA_TYPE for m in media) else "binary"


#: The copy semantics that places a copy like ``cp``.
CP_V1 = "cp-v1"
#: What each cp-v1 mode is on the guest's side, for an upload and a download.
_CP_V1_MODES = {"cp-v1-binary": "binary", "cp-v1-tar": "tar", "cp-v1-recursive": "recursive"}


def cp_semantics(mode: str | None, copy_semantics: str | None) -> str:
    """``cp-v1`` for a ``cp-v1-*`` mode or ``copy_semantics=cp-v1``, else ``legacy``."""
    return CP_V1 if mode in _CP_V1_MODES or copy_semantics == CP_V1 else "legacy"


def cp_upload_mode(request: IRequest, mode: str | None, source_type: str | None) -> str:
    """
    How the guest reads an upload's body, ``binary`` or ``tar``: the legacy
    mode (see :func:`cp_mode`); ``cp-v1-binary`` or ``cp-v1-tar``;
    ``cp-v1-recursive`` by ``source_type`` (a file is binary, a directory a
    tar), else by ``Content-Type`` like a missing mode.
    """
    wire = _CP_V1_MODES.get(mode or "")
    if wire == "recursive":
        by_type = {"file": "binary", "directory": "tar"}.get(source_type or "")
        return by_type or cp_mode(request, None, b"content-type")
    return wire or cp_mode(request, mode, b"content-type")


def cp_download_mode(request: IRequest, mode: str | None) -> str:
    """What the guest sends: ``binary``, ``tar`` or ``recursive`` (a file's bytes or a directory's tar)."""
    return _CP_V1_MODES.get(mode or "") or cp_mode(request, mode, b"accept")


def cp_source(
    semantics: str, wire_mode: str, source_name: str | None, source_type: str | None, copy_contents: bool
) -> tuple[str | None, bool]:
    """
    The ``(source_name, copy_contents)`` a cp-v1 upload is placed by, checked
    against each other and the mode; ``(None, False)`` for a legacy upload,
    whose placement they do not change.

    :raise BadRequest: ``source_type`` does not match the mode,
        ``copy_contents`` for a file, a ``source_name`` that is not a base
        name, or none where it is needed (unless ``copy_contents``).
    """
    if semantics != CP_V1:
        return None, False
    expected = "file" if wire_mode == "binary" else "directory"
    if source_type is not None and source_type != expected:
        raise BadRequest(f"source_type={source_type} does not match a {wire_mode} upload (a file is sent binary, "
                         "a directory as a tar)", code="invalid_query")
    if copy_contents and wire_mode == "binary":
        raise BadRequest("copy_contents applies to a directory (a tar upload), not to a file", code="invalid_query")
    name = source_name or None
    if name is not None and ("/" in name or name in (".", "..")):
        raise BadRequest(f"query parameter 'source_name' must be a base name (no '/', not . or ..), not {name!r}",
                         code="invalid_query")
    if name is None and not copy_contents:
        raise BadRequest("query parameter 'source_name' is required with cp-v1 semantics (unless copy_contents=true)",
                         code="invalid_query")
    return name, copy_contents


#: The header in which a tar upload announces the bytes of its regular files.
UNPACKED_SIZE_HEADER = b"X-Slicer-Unpacked-Size"


def unpacked_size(request: IRequest) -> int | None:
    """
    ``X-Slicer-Unpacked-Size``: a count of bytes in decimal digits (the last
    one when repeated), or ``None`` when absent.

    :raise BadRequest: ``invalid_header`` for anything else.
    """
    values = request.requestHeaders.getRawHeaders(UNPACKED_SIZE_HEADER)
    if not values:
        return None
    raw = values[-1]
    text = (raw.decode("latin-1") if isinstance(raw, bytes) else raw).strip(" \t")
    if not re.fullmatch(r"[0-9]{1,20}", text):
        raise BadRequest(f"header X-Slicer-Unpacked-Size must be a byte count (decimal digits), not {text[:40]!r}",
                         code="invalid_header")
    return int(text)


__all__ = [
    "resume_after",
    "CP_V1",
    "DEFAULT_GRACE_MS",
    "DEFAULT_WAIT",
    "KILL_SIGNALS",
    "MAX_SECRET_BODY",
    "SHUTDOWN_ACTIONS",
    "UNPACKED_SIZE_HEADER",
    "cp_download_mode",
    "cp_mode",
    "cp_semantics",
    "cp_source",
    "cp_upload_mode",
    "create_request",
    "fs_mkdir_request",
    "json_object",
    "kill_request",
    "last_event_id",
    "secret_create",
    "secret_update",
    "shutdown_action",
    "structure",
    "tag_edit",
    "timeout_param",
    "unpacked_size",
    "wait",
    "wait_param",
]
