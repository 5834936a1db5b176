# -*- test-case-name: tests.e2b.test_site -*-
"""
The E2B listener's site: one HTTP port for both planes, as the SDKs use it
when ``E2B_API_URL`` and ``E2B_SANDBOX_URL`` name the same URL.  A request
carrying ``E2b-Sandbox-Id`` is for that sandbox's data plane
(:mod:`.data_plane`), as is a signed ``/files`` URL (:mod:`.signing`: the
SDKs build it without the header) for the running sandbox whose token
signed it (none: envd's 401 ``invalid signature``); any other is the control
plane's (:mod:`.control`).

Every request is first checked when its headers arrive (the Slicer API's
:class:`~vmservice.api.gate.RequestGate` and
:class:`~vmservice.api.streaming.StreamingSite`): its ``Host`` and
``Origin`` (no browser page may drive it), and, for the control plane,
``X-API-KEY`` against the daemon's tokens when auth is on (any key with auth
off); a body over :data:`~.inputs.MAX_BODY` is refused before it is stored,
except an upload's (``POST /files``), which is streamed to the guest as it
arrives, unbounded as the Slicer API's uploads are.
Connections are bounded as the API's are (``limits``).
"""

from __future__ import annotations

from typing import Mapping, Optional, cast
from urllib.parse import parse_qs

from twisted.internet.interfaces import IReactorTime
from twisted.web.http_headers import Headers
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from twisted.web.server import NOT_DONE_YET, Request
from zope.interface import implementer

from ..api.connection_limits import ConnectionLimits
from ..api.gate import RequestGate
from ..api.streaming import BodyPlan, StreamingSite
from ..auth import Tokens
from ..config import ApiConfig, Config, E2bConfig
from ..errors import BodyTooLarge, Unauthorized
from .control import ControlPlane, answer
from .data_plane import DataPlane, PlainHandler, RpcMethod
from .envd import envd_methods, envd_routes
from .failures import Call, error_body, failure_of
from .inputs import MAX_BODY
from .host import SandboxHost
from .sandbox import SandboxState
from .sandboxes import Sandboxes
from .signing import BadQuery, files_query, operation_of, signed_sandbox

#: The header that sends a request to a sandbox's data plane.
SANDBOX_HEADER = b"e2b-sandbox-id"
#: The path of the file routes, which may be signed instead.
FILES_PATH = b"/files"


def signed_files(method: bytes, uri: bytes) -> bool:
    """Whether ``method uri`` is a ``/files`` request carrying a signature."""
    path, _, query = uri.partition(b"?")
    return method in (b"GET", b"POST") and path == FILES_PATH and b"signature" in parse_qs(query)


def _with_key(headers: Headers) -> Headers:
    """``headers`` with ``X-API-KEY`` presented as a bearer token (what the token store compares)."""
    keys = headers.getRawHeaders(b"x-api-key") or []
    translated = Headers()
    for name, values in headers.getAllRawHeaders():
        if name.lower() not in (b"authorization", b"x-api-key"):
            translated.setRawHeaders(name, values)
    if keys:
        translated.setRawHeaders(b"authorization", [b"Bearer " + keys[-1].strip()])
    return translated


@implementer(IResource)
class E2bRoot:
    """
    The site's one resource: a refused request answered, the others to their plane.

    :param control: the control plane.
    :param data: the data plane.
    """

    isLeaf = True

    def __init__(self, control: ControlPlane, data: DataPlane, control_gate: RequestGate,
                 data_gate: RequestGate) -> None:
        self.control, self.data = control, data
        self._control_gate, self._data_gate = control_gate, data_gate

    def getChildWithDefault(self, name: bytes, request: IRequest) -> "E2bRoot":
        return self

    def putChild(self, path: bytes, child: IResource) -> None:
        raise NotImplementedError

    def plan_body(self, method: bytes, uri: bytes, headers: Headers, length: Optional[int]) -> BodyPlan:
        """The gate's refusal, if any; else an upload's body streamed, any other read whole up to :data:`MAX_BODY`."""
        upload = method == b"POST" and uri.partition(b"?")[0] == FILES_PATH
        try:
            if headers.hasHeader(SANDBOX_HEADER) or signed_files(method, uri):
                self._data_gate.check(method, headers, None, length=length, limit=None if upload else MAX_BODY)
                if upload:
                    return BodyPlan(streamed=True)
            else:
                self._control_gate.check(method, _with_key(headers), None, length=length, limit=MAX_BODY)
        except Unauthorized:
            return BodyPlan(refusal=Unauthorized("Invalid API key"))
        except BodyTooLarge:
            return BodyPlan(refusal=BodyTooLarge(f"the body is over {MAX_BODY} bytes"))
        except Exception as refusal:
            return BodyPlan(refusal=refusal)
        return BodyPlan(limit=MAX_BODY)

    def render(self, request: IRequest) -> int:
        refusal = getattr(request, "refusal", None)
        if isinstance(refusal, Exception):
            status, body = failure_of(refusal, Call.OTHER)
            answer(request, status, body)
            return NOT_DONE_YET
        sandbox_id = request.getHeader(SANDBOX_HEADER)
        if sandbox_id is not None:
            return self.data.render(cast(Request, request), sandbox_id.decode("latin-1"))
        if signed_files(request.method, request.uri):
            return self._signed(request)
        return self.control.render(request)

    def _signed(self, request: IRequest) -> int:
        """A signed ``/files`` request, to the sandbox whose token signed it."""
        try:
            query = files_query(request.args or {})
        except BadQuery as error:
            answer(request, 400, error_body(400, str(error)))
            return NOT_DONE_YET
        tokens = ((view.sandbox.sandbox_id, view.sandbox.access_token) for view in self.data.sandboxes.all()
                  if view.state is SandboxState.RUNNING)
        found = signed_sandbox(query, operation_of(request.method), tokens)
        if found is None:
            answer(request, 401, error_body(401, "invalid signature"))
            return NOT_DONE_YET
        return self.data.render(cast(Request, request), found)


def e2b_site(reactor: IReactorTime, config: Config, e2b: E2bConfig, sandboxes: Sandboxes, host: SandboxHost,
             tokens: Tokens | None, methods: Mapping[str, RpcMethod] | None = None,
             plain: Mapping[tuple[bytes, str], PlainHandler] | None = None) -> ConnectionLimits:
    """
    The E2B listener's site over ``sandboxes`` on ``host``, its connections
    bounded as the API's; its data plane serves ``methods`` and ``plain``
    (by default, every service of :mod:`.envd`).
    """
    listener = ApiConfig(bind_address=e2b.bind_address, port=e2b.port, auth=config.api.auth,
                                    allowed_hosts=config.api.allowed_hosts,
                                    allowed_origins=config.api.allowed_origins)
    data = DataPlane(reactor, sandboxes, host,
                     envd_methods(reactor, sandboxes, host) if methods is None else methods,
                     envd_routes(reactor, sandboxes, host) if plain is None else plain)
    root = E2bRoot(ControlPlane(sandboxes, e2b), data, RequestGate(tokens, listener),
                   RequestGate(None, listener))
    site = StreamingSite(root, root.plan_body)
    site.displayTracebacks = False
    return ConnectionLimits(site, reactor, config.limits.max_connections, config.limits.max_connections_per_peer)


__all__ = ["E2bRoot", "SANDBOX_HEADER", "e2b_site"]
