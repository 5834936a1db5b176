# -*- test-case-name: tests.cluster.kubelet.test_params -*-
"""
The kubelet API's paths and queries, read strictly (pure: text in, records
or :class:`~vmservice.errors.BadRequest` out).

A path names ``{namespace}/{pod}/{container}``: a DNS label, a DNS
subdomain and a DNS label, as Kubernetes names them, so a hostile name never
reaches further than this module.  Booleans are ``1``/``true`` or
``0``/``false`` (the API server writes ``1``; an exec's streams it names
``input``, ``output`` and ``error``), integers plain decimal digits;
a parameter given twice, or a value of the wrong kind, is a 400.  Parameters
this API does not know are ignored, as the kubelet ignores them.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Optional
from urllib.parse import parse_qsl, unquote

from attrs import frozen

from ...errors import BadRequest

#: The longest query read, and the most parameters in it.
MAX_QUERY = 64 * 1024
MAX_PARAMS = 256
#: The most words of an exec's command, and the longest word.
MAX_WORDS = 128
MAX_WORD = 8192
#: The largest integer a parameter may give.
MAX_INTEGER = 2**53

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DIGITS = re.compile(r"-?[0-9]{1,18}")
#: The streams of an exec: the name the API server gives the kubelet, and PodExecOptions' name.
STREAMS = (("input", "stdin"), ("output", "stdout"), ("error", "stderr"))
_TRUE, _FALSE = ("1", "true", "True"), ("0", "false", "False", "")


@frozen
class Target:
    """The container a request names: ``namespace/pod/container``."""

    namespace: str
    pod: str
    container: str


@frozen
class LogsQuery:
    """What ``containerLogs`` asks for (the kubelet's PodLogOptions)."""

    follow: bool = False
    timestamps: bool = False
    tail_lines: Optional[int] = None
    limit_bytes: Optional[int] = None
    since_seconds: Optional[int] = None
    since_time: Optional[datetime] = None


@frozen
class ExecQuery:
    """What ``exec`` asks for: the command (argv, no shell) and its streams."""

    command: tuple[str, ...]
    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False


def target(segments: list[str]) -> Target:
    """
    The target named by the path's segments after the action (percent-decoded here).

    :raise BadRequest: not three segments, or a name Kubernetes would not give.
    """
    if len(segments) != 3:
        raise BadRequest("the path must be /ACTION/NAMESPACE/POD/CONTAINER")
    namespace, pod, container = (unquote(segment, errors="replace") for segment in segments)
    if not _LABEL.fullmatch(namespace):
        raise BadRequest("the namespace is not a DNS label")
    if not _SUBDOMAIN.fullmatch(pod):
        raise BadRequest("the pod name is not a DNS subdomain")
    if not _LABEL.fullmatch(container):
        raise BadRequest("the container name is not a DNS label")
    return Target(namespace, pod, container)


def query_pairs(query: bytes) -> dict[str, list[str]]:
    """
    The parameters of a raw query string, each with its values in order.

    :raise BadRequest: too long, too many parameters, or not UTF-8.
    """
    if len(query) > MAX_QUERY:
        raise BadRequest(f"the query is longer than {MAX_QUERY} bytes")
    try:
        pairs = parse_qsl(query.decode("ascii"), keep_blank_values=True, strict_parsing=False,
                          errors="strict", max_num_fields=MAX_PARAMS)
    except (UnicodeDecodeError, ValueError) as error:
        raise BadRequest(f"the query cannot be read: {error}") from None
    found: dict[str, list[str]] = {}
    for name, value in pairs:
        found.setdefault(name, []).append(value)
    return found


def _one(params: dict[str, list[str]], name: str) -> Optional[str]:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise BadRequest(f"{name} is given more than once")
    return values[0]


def _boolean(params: dict[str, list[str]], name: str) -> bool:
    value = _one(params, name)
    if value is None or value in _FALSE:
        return False
    if value in _TRUE:
        return True
    raise BadRequest(f"{name} must be true or false")


def _integer(params: dict[str, list[str]], name: str, low: int) -> Optional[int]:
    value = _one(params, name)
    if value is None:
        return None
    if not _DIGITS.fullmatch(value):
        raise BadRequest(f"{name} must be an integer")
    number = int(value)
    if not low <= number <= MAX_INTEGER:
        raise BadRequest(f"{name} must be at least {low}")
    return number


def _time(params: dict[str, list[str]], name: str) -> Optional[datetime]:
    value = _one(params, name)
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(f"{name} must be an RFC 3339 time") from None
    if when.tzinfo is None or "T" not in value:
        raise BadRequest(f"{name} must be an RFC 3339 time with its offset")
    return when


def logs_query(params: dict[str, list[str]]) -> LogsQuery:
    """
    The options of ``containerLogs``.

    :raise BadRequest: a bad value, both ``sinceSeconds`` and ``sinceTime``,
        or ``previous=true`` (a VM has no previous instance).
    """
    if _boolean(params, "previous"):
        raise BadRequest("a VM has no previous instance: previous=true cannot be answered")
    query = LogsQuery(
        follow=_boolean(params, "follow"),
        timestamps=_boolean(params, "timestamps"),
        tail_lines=_integer(params, "tailLines", 0),
        limit_bytes=_integer(params, "limitBytes", 1),
        since_seconds=_integer(params, "sinceSeconds", 1),
        since_time=_time(params, "sinceTime"),
    )
    if query.since_seconds is not None and query.since_time is not None:
        raise BadRequest("at most one of sinceSeconds or sinceTime may be given")
    return query


def exec_query(params: dict[str, list[str]]) -> ExecQuery:
    """
    The options of ``exec``: the streams by the names the API server writes
    (``input``, ``output``, ``error``) or by those of PodExecOptions
    (``stdin``, ``stdout``, ``stderr``).

    :raise BadRequest: no command, too long a command, a NUL in it, a bad
        boolean, or none of stdin, stdout and stderr.
    """
    command = tuple(params.get("command", ()))
    if not command or not command[0]:
        raise BadRequest("exec needs a command (command=PROGRAM&command=ARG...)")
    if len(command) > MAX_WORDS or any(len(word) > MAX_WORD or "\0" in word for word in command):
        raise BadRequest(f"the command has more than {MAX_WORDS} words, a word over {MAX_WORD} "
                         "characters or a NUL")
    stdin, stdout, stderr = (_boolean(params, wire) or _boolean(params, name) for wire, name in STREAMS)
    query = ExecQuery(command, stdin, stdout, stderr, _boolean(params, "tty"))
    if not (query.stdin or query.stdout or query.stderr):
        raise BadRequest("you must specify at least one of input (stdin), output (stdout) and error (stderr)")
    return query


__all__ = ["STREAMS", "ExecQuery", "LogsQuery", "Target", "exec_query", "logs_query", "query_pairs", "target"]
