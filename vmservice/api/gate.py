# -*- test-case-name: tests.api.test_gate -*-
"""
The checks every request passes before anything of it is acted on or
stored: the one decision, made from its method and headers, whether the
daemon serves it at all.

In this order:

1. **Host** (TCP only): a browser page that rebinds its own DNS name to the
   daemon's address sends that name as ``Host``.  Accepted: no ``Host``
   (HTTP/1.0 and raw clients; every browser sends one), the bound address
   (IPv6 in brackets), ``localhost`` when bound to a loopback or wildcard
   address, the names of ``api.allowed_hosts``, and, bound to a wildcard
   address (``0.0.0.0``, ``::``), any IP address (rebinding needs a name).
   The port is not compared (port forwards and proxies change it; a name is
   what rebinding needs).  Another name is 421 ``invalid_host``; a
   malformed or repeated ``Host`` 400 ``invalid_host``.  On a UNIX socket
   clients send ``unix`` or ``localhost``, and no browser reaches it: not
   checked.
2. **Origin** of a request that can change state (every method but GET,
   HEAD and OPTIONS, and every upgrade: a WebSocket's is a GET): no
   ``Origin`` is a client that is no browser (curl, the SDKs, ``vmctl``)
   and passes, unless it says ``Sec-Fetch-Site: cross-site``; an
   ``Origin`` passes when it is one of ``api.allowed_origins`` (exactly)
   or, on TCP, the daemon's own (``http://`` and the checked ``Host``).
   Anything else is 403 ``forbidden_origin``.
3. **Credentials**, on every route that is not public (:meth:`RequestGate.authorized`,
   the one place that decides): 401 ``unauthorized``.
4. **The body's size**: a declared ``Content-Length`` over the route's limit
   is 413 ``body_too_large``.

:class:`~vmservice.api.streaming.StreamingRequest` asks when the headers
have arrived (:meth:`vmservice.api.app.Api.plan_body`), before any byte of
the body is read; the app's view asks again (without the size, which the
body readers bound) for requests that did not come through it.
"""

from __future__ import annotations

import ipaddress
import re

from twisted.web.http_headers import Headers

from ..auth import Tokens
from ..config import ApiConfig
from ..errors import BadRequest, BodyTooLarge, ForbiddenOrigin, MisdirectedRequest, Unauthorized
from .routing import Route

#: Methods that change nothing (RFC 9110 safe methods our routes use).
SAFE_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS"})

#: A Host's name: letters, digits, '-', '_' and dots (what a DNS name can be).
_NAME = re.compile(r"[a-z0-9_.-]+")


def state_changing(method: bytes, headers: Headers) -> bool:
    """
    Whether a request may change something: a method other than GET, HEAD
    and OPTIONS, or any upgrade (a WebSocket opens with a GET).
    """
    return method.upper() not in SAFE_METHODS or headers.hasHeader(b"upgrade")


def _one(headers: Headers, name: bytes) -> bytes | None:
    """
    The one value of header ``name``, ``None`` when absent.

    :raise ValueError: it is given more than once.
    """
    values = headers.getRawHeaders(name)
    if not values:
        return None
    if len(values) > 1:
        raise ValueError(name)
    return values[0]


def host_name(value: bytes) -> str:
    """
    The host of a ``Host`` value without its port, lowercased, without a
    final dot; an IPv6 address without its brackets.

    :raise ValueError: not ``host[:port]`` or ``[ipv6][:port]``.
    """
    text = value.decode("ascii").strip().lower()
    if text.startswith("["):
        address, bracket, port = text[1:].partition("]")
        if not bracket or (port and not (port.startswith(":") and port[1:].isdigit())):
            raise ValueError(text)
        return ipaddress.IPv6Address(address).compressed
    name, colon, port = text.partition(":")
    if (colon and port and not port.isdigit()) or not _NAME.fullmatch(name):
        raise ValueError(text)
    return name.rstrip(".")


class RequestGate:
    """
    Decides whether a request is served, from its method and headers.

    :param tokens: the valid bearer tokens (a single one may be given as a
        string), or ``None`` when authentication is off.
    :param listener: where the API listens and what it allows
        (``config.api``); ``None`` checks no ``Host`` (as on a UNIX socket)
        and allows no ``Origin``.
    """

    def __init__(self, tokens: Tokens | str | None, listener: ApiConfig | None = None) -> None:
        self._tokens = Tokens.fixed(tokens) if isinstance(tokens, str) else tokens
        self._origins = frozenset(listener.allowed_origins if listener else ())
        self._hosts = frozenset(listener.allowed_hosts if listener else ())
        self._tcp = listener is not None and listener.unix_socket_path is None
        bound = ipaddress.ip_address(listener.bind_address) if listener is not None and self._tcp else None
        self._bound = bound
        self._wildcard = bound is not None and bound.is_unspecified
        self._loopback = bound is not None and (bound.is_loopback or bound.is_unspecified)

    def check(self, method: bytes, headers: Headers, route: Route | None, *,
              length: int | None = None, limit: int | None = None) -> None:
        """
        Refuse the request, or let it through.

        :param method: its method.
        :param headers: its headers.
        :param route: the route it matched; ``None`` when it matched none
            (it then needs credentials like any route that is not public).
        :param length: its declared ``Content-Length``; ``None`` when it has
            none (chunked) or when its body was already read.
        :param limit: the most bytes of body its route takes; ``None``: no bound.
        :raise ServiceError: the refusal, to be answered as an ErrorResponse:
            ``invalid_host`` (400, 421), ``forbidden_origin`` (403),
            ``unauthorized`` (401), ``body_too_large`` (413).
        """
        host = self._check_host(headers)
        self._check_origin(method, headers, host)
        if not (route is not None and route.public) and not self.authorized(headers):
            raise Unauthorized("missing or invalid bearer token")
        if limit is not None and length is not None and length > limit:
            raise BodyTooLarge(f"the body ({length} bytes) is over this route's limit of {limit} bytes")

    def authorized(self, headers: Headers) -> bool:
        """
        Whether the request carries valid credentials (always, with
        authentication off): the one place this is decided.
        """
        return self._tokens is None or self.identity(headers) is not None

    def identity(self, headers: Headers) -> str | None:
        """
        What names the valid token a request presents (its label or digest,
        never the token), ``None`` without one or with authentication off.
        """
        if self._tokens is None:
            return None
        values = headers.getRawHeaders(b"authorization")
        return self._tokens.identify(values[-1] if values else None)

    def _check_host(self, headers: Headers) -> bytes | None:
        """The request's ``Host`` (``None`` when absent) once it passed; refusals as :meth:`check` says."""
        try:
            value = _one(headers, b"host")
        except ValueError:
            raise BadRequest("more than one Host header", code="invalid_host") from None
        if value is None or not self._tcp:
            return value
        try:
            name = host_name(value)
        except (ValueError, UnicodeDecodeError):
            raise BadRequest("the Host header is not host[:port]", code="invalid_host") from None
        if not self._host_allowed(name):
            raise MisdirectedRequest(
                f"this daemon does not answer for host {name!r} (add it to api.allowed_hosts to allow it)"
            )
        return value

    def _host_allowed(self, name: str) -> bool:
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return name in self._hosts or (name == "localhost" and self._loopback)
        return self._wildcard or address == self._bound or address.compressed in self._hosts

    def _check_origin(self, method: bytes, headers: Headers, host: bytes | None) -> None:
        if not state_changing(method, headers):
            return
        try:
            origin = _one(headers, b"origin")
        except ValueError:
            raise ForbiddenOrigin("more than one Origin header") from None
        if origin is not None:
            text = origin.decode("latin-1").strip()
            if text in self._origins:
                return
            own = self._tcp and host is not None and origin.strip().lower() == b"http://" + host.strip().lower()
            if not own:
                raise ForbiddenOrigin(
                    f"requests from origin {text!r} may not change anything here (api.allowed_origins)"
                )
        sites = headers.getRawHeaders(b"sec-fetch-site") or []
        if any(site.strip().lower() == b"cross-site" for site in sites):
            raise ForbiddenOrigin("a browser's cross-site request may not change anything here")


__all__ = ["RequestGate", "SAFE_METHODS", "host_name", "state_changing"]
