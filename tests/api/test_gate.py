"""
The request gate (:mod:`vmservice.api.gate`): each refusal (Host, Origin,
Sec-Fetch-Site, token, declared size) and each request it lets through,
from methods and headers alone.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.http_headers import Headers

from vmservice.api.gate import RequestGate, host_name, state_changing
from vmservice.api.routing import Reply, Route
from vmservice.config import ApiConfig, AuthConfig
from vmservice.errors import BadRequest, BodyTooLarge, ForbiddenOrigin, MisdirectedRequest, ServiceError, Unauthorized

TOKEN = "t0ken-value"


async def _handler(request: Any, query: Any) -> bytes:
    return b""


PRIVATE = Route("POST", "/hostgroup/{name}/nodes", _handler, "create", "nodes", {201: Reply("made")})
PUBLIC = Route("GET", "/healthz", _handler, "health", "service", {200: Reply("ok")}, public=True)

LOOPBACK = ApiConfig(bind_address="127.0.0.1", port=8080)


def headers(**values: str | list[str]) -> Headers:
    """Headers from keyword arguments (``_`` for ``-``); a list gives a header more than once."""
    result = Headers()
    for name, value in values.items():
        result.setRawHeaders(name.replace("_", "-"), value if isinstance(value, list) else [value])
    return result


class GateTestCase(SynchronousTestCase):
    def refusal(self, gate: RequestGate, method: bytes, given: Headers, route: Route | None = PRIVATE,
                **sizes: int | None) -> ServiceError | None:
        """What ``gate`` refuses the request with, or ``None`` when it lets it through."""
        try:
            gate.check(method, given, route, **sizes)
        except ServiceError as error:
            return error
        return None

    def assertRefused(self, gate: RequestGate, method: bytes, given: Headers, kind: type[ServiceError],
                      status: int, code: str, route: Route | None = PRIVATE) -> None:
        error = self.refusal(gate, method, given, route)
        self.assertIsInstance(error, kind)
        assert error is not None
        self.assertEqual((error.status, error.code), (status, code))

    def assertAllowed(self, gate: RequestGate, method: bytes, given: Headers, route: Route | None = PRIVATE) -> None:
        self.assertIsNone(self.refusal(gate, method, given, route))


class HostTests(GateTestCase):
    """The Host check on TCP (DNS rebinding), and none on a UNIX socket."""

    def test_loopback(self) -> None:
        """Bound to 127.0.0.1: that address and localhost, with any port or none, in any case."""
        gate = RequestGate(None, LOOPBACK)
        for host in ("127.0.0.1:8080", "127.0.0.1", "localhost:8080", "LocalHost", "localhost.", "localhost:9000"):
            self.assertAllowed(gate, b"POST", headers(host=host))

    def test_rebinding_name(self) -> None:
        """Any other name is 421 invalid_host, even on a GET: the answer is what rebinding would read."""
        gate = RequestGate(None, LOOPBACK)
        for host in ("evil.example:8080", "evil.example", "127.0.0.1.nip.io", "localhost.evil.example"):
            for method in (b"GET", b"POST", b"HEAD"):
                self.assertRefused(gate, method, headers(host=host), MisdirectedRequest, 421, "invalid_host", PUBLIC)

    def test_other_addresses(self) -> None:
        """Bound to 127.0.0.1, another address (even a loopback one) is not this daemon's."""
        gate = RequestGate(None, LOOPBACK)
        for host in ("127.0.0.2", "[::1]:8080", "10.0.0.1"):
            self.assertRefused(gate, b"GET", headers(host=host), MisdirectedRequest, 421, "invalid_host")

    def test_malformed_or_repeated(self) -> None:
        """A Host that is not host[:port], or more than one Host, is 400 invalid_host."""
        gate = RequestGate(None, LOOPBACK)
        for host in ("127.0.0.1:port", "[::1", "[::1]x", "[nope]", "a/b", "", "127.0.0.1:8080:1", "é"):
            self.assertRefused(gate, b"GET", headers(host=host), BadRequest, 400, "invalid_host")
        self.assertRefused(gate, b"GET", headers(host=["127.0.0.1", "evil.example"]), BadRequest, 400, "invalid_host")

    def test_missing(self) -> None:
        """No Host (HTTP/1.0, raw clients; browsers always send one) passes."""
        self.assertAllowed(RequestGate(None, LOOPBACK), b"POST", Headers())

    def test_ipv6(self) -> None:
        """Bound to ::1: [::1] with or without a port, and localhost."""
        gate = RequestGate(None, ApiConfig(bind_address="::1"))
        for host in ("[::1]:8080", "[::1]", "[0:0::1]", "localhost"):
            self.assertAllowed(gate, b"GET", headers(host=host))
        self.assertRefused(gate, b"GET", headers(host="127.0.0.1"), MisdirectedRequest, 421, "invalid_host")

    def test_wildcard(self) -> None:
        """Bound to 0.0.0.0 or ::, any IP address and localhost pass, but names only when allowed."""
        for address in ("0.0.0.0", "::"):
            gate = RequestGate(TOKEN, ApiConfig(bind_address=address, auth=AuthConfig(enabled=True),
                                                allowed_hosts=("vms.example.com",)))
            auth = {"authorization": f"Bearer {TOKEN}"}
            for host in ("192.0.2.4:8080", "[2001:db8::2]", "localhost", "vms.example.com:8080", "VMS.example.com"):
                self.assertAllowed(gate, b"GET", headers(host=host, **auth))
            self.assertRefused(gate, b"GET", headers(host="evil.example", **auth), MisdirectedRequest, 421,
                               "invalid_host")

    def test_specific_address(self) -> None:
        """Bound to one public address: that address and the allowed names; not localhost."""
        gate = RequestGate(None, ApiConfig(bind_address="192.0.2.7", allowed_hosts=("vms.example.com", "10.1.1.1"),
                                           allow_unauthenticated_remote=True))
        for host in ("192.0.2.7:8080", "vms.example.com", "10.1.1.1"):
            self.assertAllowed(gate, b"GET", headers(host=host))
        for host in ("localhost", "192.0.2.8", "other.example.com"):
            self.assertRefused(gate, b"GET", headers(host=host), MisdirectedRequest, 421, "invalid_host")

    def test_unix_socket(self) -> None:
        """On a UNIX socket any Host passes: clients send unix or localhost, and no browser reaches it."""
        gate = RequestGate(None, ApiConfig(bind_address="/run/vmservice/api.sock"))
        for host in ("unix", "localhost", "evil.example"):
            self.assertAllowed(gate, b"POST", headers(host=host))

    @given(st.text(max_size=40))
    def test_host_name_total(self, text: str) -> None:
        """Any Host value either parses to a host without its port (an IPv6 address alone keeps colons) or is refused."""
        try:
            name = host_name(text.encode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return
        if ":" in name:
            ipaddress.IPv6Address(name)
        self.assertEqual(name, name.lower())


class OriginTests(GateTestCase):
    """Cross-origin browser requests on state-changing routes and upgrades."""

    def setUp(self) -> None:
        self.gate = RequestGate(None, ApiConfig(allowed_origins=("https://vms.example.com",)))

    def test_state_changing(self) -> None:
        """Every method but GET, HEAD and OPTIONS, and every upgrade, can change state."""
        for method in (b"POST", b"PUT", b"PATCH", b"DELETE", b"BREW", b"post"):
            self.assertTrue(state_changing(method, Headers()), method)
        for method in (b"GET", b"HEAD", b"OPTIONS"):
            self.assertFalse(state_changing(method, Headers()), method)
        self.assertTrue(state_changing(b"GET", headers(upgrade="websocket")))

    def test_no_origin(self) -> None:
        """Clients that send no Origin (curl, the SDKs, vmctl) pass on every method."""
        for method in (b"POST", b"DELETE", b"PATCH", b"GET"):
            self.assertAllowed(self.gate, method, headers(host="127.0.0.1:8080"))
        self.assertAllowed(self.gate, b"GET", headers(host="127.0.0.1:8080", upgrade="websocket"))

    def test_foreign_origin(self) -> None:
        """A foreign Origin on a state-changing request or an upgrade is 403 forbidden_origin."""
        for origin in ("http://evil.example", "null", "https://vms.example.com.evil.example", "http://127.0.0.1:3000",
                       "https://VMS.example.com"):
            given = headers(host="127.0.0.1:8080", origin=origin)
            for method in (b"POST", b"DELETE", b"PUT", b"PATCH"):
                self.assertRefused(self.gate, method, given, ForbiddenOrigin, 403, "forbidden_origin")
            upgrade = headers(host="127.0.0.1:8080", origin=origin, upgrade="websocket", connection="Upgrade")
            self.assertRefused(self.gate, b"GET", upgrade, ForbiddenOrigin, 403, "forbidden_origin")

    def test_foreign_origin_reads(self) -> None:
        """A foreign Origin on GET or HEAD without an upgrade passes (the browser keeps the answer from the page)."""
        for method in (b"GET", b"HEAD", b"OPTIONS"):
            self.assertAllowed(self.gate, method, headers(host="127.0.0.1:8080", origin="http://evil.example"))

    def test_allowed_origin(self) -> None:
        """An allowed origin passes, even on a cross-site request."""
        given = headers(host="127.0.0.1:8080", origin="https://vms.example.com", sec_fetch_site="cross-site")
        self.assertAllowed(self.gate, b"POST", given)
        self.assertAllowed(self.gate, b"GET", headers(origin="https://vms.example.com", upgrade="websocket"))

    def test_own_origin(self) -> None:
        """On TCP, the daemon's own origin (http:// and the checked Host) passes."""
        self.assertAllowed(self.gate, b"POST", headers(host="127.0.0.1:8080", origin="http://127.0.0.1:8080"))
        self.assertAllowed(self.gate, b"POST", headers(host="localhost:8080", origin="http://localhost:8080"))
        self.assertRefused(self.gate, b"POST", headers(host="localhost:8080", origin="http://localhost:8081"),
                           ForbiddenOrigin, 403, "forbidden_origin")
        self.assertRefused(self.gate, b"POST", headers(origin="http://localhost:8080"), ForbiddenOrigin, 403,
                           "forbidden_origin")

    def test_unix_socket_has_no_own_origin(self) -> None:
        """On a UNIX socket, whose Host is not checked, only allowed origins pass."""
        gate = RequestGate(None, ApiConfig(bind_address="./api.sock"))
        self.assertRefused(gate, b"POST", headers(host="localhost", origin="http://localhost"), ForbiddenOrigin, 403,
                           "forbidden_origin")

    def test_cross_site(self) -> None:
        """Sec-Fetch-Site: cross-site is refused on state-changing requests and upgrades, whatever the Origin."""
        for site_origin in ({}, {"origin": "http://127.0.0.1:8080"}):
            given = headers(host="127.0.0.1:8080", sec_fetch_site="cross-site", **site_origin)
            self.assertRefused(self.gate, b"POST", given, ForbiddenOrigin, 403, "forbidden_origin")
        self.assertRefused(self.gate, b"GET", headers(sec_fetch_site="Cross-Site", upgrade="websocket"),
                           ForbiddenOrigin, 403, "forbidden_origin")
        for site in ("same-origin", "same-site", "none"):
            self.assertAllowed(self.gate, b"POST", headers(host="127.0.0.1:8080", sec_fetch_site=site))
        self.assertAllowed(self.gate, b"GET", headers(sec_fetch_site="cross-site"))

    def test_repeated_origin(self) -> None:
        """Two Origin headers are refused (which one would a check believe?)."""
        given = headers(origin=["https://vms.example.com", "http://evil.example"])
        self.assertRefused(self.gate, b"POST", given, ForbiddenOrigin, 403, "forbidden_origin")


class CredentialTests(GateTestCase):
    """The bearer token, decided in one place."""

    def test_token(self) -> None:
        """With a token, a route that is not public (or no route) needs it; public routes do not."""
        gate = RequestGate(TOKEN)
        for route in (PRIVATE, None):
            self.assertRefused(gate, b"POST", Headers(), Unauthorized, 401, "unauthorized", route)
            self.assertRefused(gate, b"POST", headers(authorization="Bearer nope"), Unauthorized, 401,
                               "unauthorized", route)
            self.assertAllowed(gate, b"POST", headers(authorization=f"Bearer {TOKEN}"), route)
            self.assertAllowed(gate, b"POST", headers(authorization=f"bearer {TOKEN}"), route)
        self.assertAllowed(gate, b"GET", Headers(), PUBLIC)
        self.assertTrue(gate.authorized(headers(authorization=f"Bearer {TOKEN}")))
        self.assertFalse(gate.authorized(Headers()))

    def test_auth_off(self) -> None:
        """With no token any Authorization header (even an empty Bearer) is ignored."""
        gate = RequestGate(None)
        for value in ("Bearer ", "Bearer junk", "Basic x"):
            self.assertAllowed(gate, b"POST", headers(authorization=value))

    def test_order(self) -> None:
        """Host and Origin are refused before credentials are looked at; credentials before the size."""
        gate = RequestGate(TOKEN, LOOPBACK)
        self.assertRefused(gate, b"POST", headers(host="evil.example", origin="http://evil.example"),
                           MisdirectedRequest, 421, "invalid_host")
        self.assertRefused(gate, b"POST", headers(origin="http://evil.example"), ForbiddenOrigin, 403,
                           "forbidden_origin")
        error = self.refusal(gate, b"POST", Headers(), length=10, limit=1)
        self.assertIsInstance(error, Unauthorized)


class SizeTests(GateTestCase):
    """The declared Content-Length against the route's limit."""

    def test_declared_length(self) -> None:
        """A declared length over the limit is 413 body_too_large; at the limit, unknown, or unbounded, it passes."""
        gate = RequestGate(None)
        error = self.refusal(gate, b"POST", Headers(), length=1025, limit=1024)
        self.assertIsInstance(error, BodyTooLarge)
        assert error is not None
        self.assertEqual((error.status, error.code), (413, "body_too_large"))
        for length, limit in ((1024, 1024), (None, 1024), (10**12, None)):
            self.assertIsNone(self.refusal(gate, b"POST", Headers(), length=length, limit=limit))
