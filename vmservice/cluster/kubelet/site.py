# -*- test-case-name: tests.cluster.kubelet.test_site -*-
"""
The kubelet API's HTTP surface: one resource that reads the path, checks
the client, and hands each request to its part; errors are Kubernetes
``Status`` bodies (:mod:`.status`).

=======================================================  =====================================
``GET /healthz``                                         ``ok``
``GET /pods``                                            a PodList of the pods of this node (none unless told)
``GET /containerLogs/{namespace}/{pod}/{container}``     the VM's console (:mod:`.logs`)
``GET /exec/{namespace}/{pod}/{container}``              a WebSocket (:mod:`.exec_socket`)
``/attach/...``                                          400: a VM has no main process to attach to
``/portForward/...``, ``/portforward/...``               501: use the daemon's own forward
anything else                                            404
=======================================================  =====================================

An exec request that asks for SPDY (``Upgrade: SPDY/3.1``, what kubectl
older than 1.30 speaks) is answered 400 saying so, as is a WebSocket that
offers neither ``v5.channel.k8s.io`` nor ``v4.channel.k8s.io``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional, Protocol

from twisted.internet.defer import Deferred
from twisted.application.service import Service
from twisted.internet.interfaces import IListeningPort, IReactorSSL, IReactorTime
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from ...api.websocket import accept, check_upgrade
from ...errors import BadRequest, ServiceError, Unauthorized
from ...guestport.guest import IGuest
from ...nodes.blocking import Blocking
from . import channels, status
from .exec_socket import MAX_MESSAGE, ExecProtocol
from .logs import ConsoleLogs
from .params import Target, exec_query, logs_query, query_pairs, target
from .pods import PodList, PodNotFound, PodResolver
from .tls import KubeletTls

log = Logger()


class Guests(Protocol):
    """What the kubelet API needs of the fleet for an exec: a running VM's guest (the fleet's ``guest``)."""

    async def guest(self, hostname: str) -> IGuest:
        """
        The guest of VM ``hostname``.

        :raise NotFound: no such VM; :raise Conflict: it does not run;
        :raise AgentNotConnected: its agent does not answer.
        """


class NotImplementedHere(ServiceError):
    """A kubelet call a VM cannot answer (501)."""

    status = 501
    code = "not_implemented"


def _header(request: Request, name: bytes) -> str:
    value = request.getHeader(name)
    return value.decode("latin-1") if isinstance(value, bytes) else ""


def _over(request: Request) -> bool:
    """Whether ``request`` was answered or its client is gone."""
    return bool(request.finished or getattr(request, "_disconnected", False))


def _offered(request: Request) -> list[str]:
    return [word.strip() for word in _header(request, b"sec-websocket-protocol").split(",") if word.strip()]


class KubeletResource(Resource):
    """
    The whole kubelet API, one leaf resource.

    :param reactor: the reactor the WebSockets run on.
    :param resolver: the pods' VMs.
    :param guests: the VMs' guests.
    :param logs: writes ``containerLogs`` answers.
    :param tls: says whether a request's client may be served.
    """

    isLeaf = True

    def __init__(self, reactor: IReactorTime, resolver: PodResolver, guests: Guests, logs: ConsoleLogs,
                 tls: Optional[KubeletTls], pods: Optional[PodList] = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._reactor = reactor
        self._resolver = resolver
        self._pod_list = pods
        self._guests = guests
        self._logs = logs
        self._tls = tls

    def render(self, request: Request) -> Any:
        if self._tls is not None and not self._tls.authenticated(getattr(getattr(request, "channel", None), "transport", None)):
            return self._fail(request, Unauthorized("a client certificate signed by the kubelet's client CA is "
                                                    "required"))
        segments = [part.decode("latin-1") for part in request.path.split(b"/")[1:]]
        action, rest = (segments[0] if segments else ""), segments[1:]
        handler: Optional[Callable[[Request, list[str]], Any]] = {
            "healthz": self._healthz, "pods": self._pods, "containerLogs": self._container_logs,
            "exec": self._exec, "attach": self._attach, "portForward": self._port_forward,
            "portforward": self._port_forward,
        }.get(action)
        if handler is None:
            return self._answer(request, 404, status.failure(404, f"no such kubelet path: {action[:64]!r}"))
        try:
            return handler(request, rest)
        except ServiceError as error:
            return self._fail(request, error)

    def _answer(self, request: Request, code: int, body: bytes, media: bytes = b"application/json") -> bytes:
        request.setResponseCode(code)
        request.setHeader(b"Content-Type", media)
        return body

    def _fail(self, request: Request, error: ServiceError) -> bytes:
        code, body = status.from_error(error)
        return self._answer(request, code, body)

    def _get_only(self, request: Request) -> None:
        if request.method not in (b"GET", b"HEAD"):
            raise BadRequest("only GET is served here")

    def _healthz(self, request: Request, rest: list[str]) -> bytes:
        return self._answer(request, 200, b"ok", b"text/plain")

    def _pods(self, request: Request, rest: list[str]) -> bytes:
        self._get_only(request)
        items = [{"metadata": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
                  "spec": {"containers": [{"name": name} for name in pod.containers]}}
                 for pod in (self._pod_list() if self._pod_list is not None else ())]
        body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}).encode()
        return self._answer(request, 200, body)

    def _attach(self, request: Request, rest: list[str]) -> bytes:
        raise BadRequest("a VM pod has no main process to attach to: use kubectl exec")

    def _port_forward(self, request: Request, rest: list[str]) -> bytes:
        raise NotImplementedHere("port forwarding is not served here: use the vmservice API's forward "
                                 "(vmctl forward, the pod's vmservice.io/api annotation names the host)")

    def _resolve(self, where: Target) -> str:
        hostname = self._resolver(where.namespace, where.pod, where.container)
        if hostname is None:
            raise PodNotFound(f"pod {where.namespace}/{where.pod} with container {where.container} is not on this node")
        return hostname

    def _run(self, request: Request, work: Deferred[Any]) -> Any:
        """Finish ``request`` once ``work`` is done: a ServiceError as its Status (when nothing was written yet)."""
        def failed(failure: Any) -> None:
            error = failure.value
            if not isinstance(error, ServiceError):
                log.failure("kubelet request failed", failure)
                error = ServiceError("the kubelet request failed")
            if _over(request):
                return
            if getattr(request, "startedWriting", False):
                request.loseConnection()
                return
            request.write(self._fail(request, error))

        def finish(_: object) -> None:
            if not _over(request) and not getattr(request, "_upgraded", False):
                request.finish()

        work.addErrback(failed).addCallback(finish)
        return NOT_DONE_YET

    def _container_logs(self, request: Request, rest: list[str]) -> Any:
        self._get_only(request)
        query = logs_query(query_pairs(request.uri.partition(b"?")[2]))
        hostname = self._resolve(target(rest))
        return self._run(request, Deferred.fromCoroutine(self._logs.write(request, query, hostname)))

    def _exec(self, request: Request, rest: list[str]) -> Any:
        if "spdy/" in _header(request, b"upgrade").lower():
            raise BadRequest("SPDY/3.1 is not supported by this node: use kubectl 1.30 or later, which speaks the "
                             f"WebSocket protocol {channels.V5}")
        check_upgrade(request)
        protocol = channels.choose(_offered(request))
        if protocol is None:
            raise BadRequest(f"the WebSocket must offer the protocol {channels.V5} (or {channels.V4})")
        query = exec_query(query_pairs(request.uri.partition(b"?")[2]))
        hostname = self._resolve(target(rest))
        return self._run(request, Deferred.fromCoroutine(self._upgrade(request, query, hostname, protocol)))

    async def _upgrade(self, request: Request, query: Any, hostname: str, protocol: str) -> None:
        guest = await self._guests.guest(hostname)
        setattr(request, "_upgraded", True)
        accept(self._reactor, lambda: ExecProtocol(guest, query, protocol), MAX_MESSAGE).render(request)


class KubeletListener(Service):
    """
    The kubelet port, listened on while the service runs.

    :param reactor: listens.
    :param site: the kubelet API (:func:`kubelet_site`).
    :param tls: its TLS material.
    :param address: the address to listen on (the node's InternalIP).
    :param port: the kubelet port (10250 by convention).
    """

    def __init__(self, reactor: IReactorSSL, site: Site, tls: KubeletTls, address: str, port: int) -> None:
        self._reactor = reactor
        self._site = site
        self._tls = tls
        self._address = address
        self._port = port
        self.listening: Optional[IListeningPort] = None

    def startService(self) -> None:
        super().startService()  # type: ignore[no-untyped-call]  # Twisted's Service is not annotated
        self.listening = self._reactor.listenSSL(self._port, self._site, self._tls.options, interface=self._address)

    def stopService(self) -> Optional[Deferred[None]]:
        super().stopService()  # type: ignore[no-untyped-call]  # Twisted's Service is not annotated
        listening, self.listening = self.listening, None
        return None if listening is None else listening.stopListening()


def kubelet_site(reactor: IReactorTime, resolver: PodResolver, guests: Guests, console_path: Callable[[str], str],
                 console_log_size: int, blocking: Blocking, tls: Optional[KubeletTls],
                 pods: Optional[PodList] = None) -> Site:
    """
    The kubelet API as a web site, to be listened on with ``tls.options``.

    :param reactor: the daemon's reactor.
    :param resolver: the pods' VMs (:class:`vmservice.cluster.pod_resolver.PodResolver`).
    :param guests: the VMs' guests (the fleet).
    :param console_path: a VM's console log by hostname, ``NotFound`` when there is no such VM.
    :param console_log_size: the configured ``console_log_size``.
    :param blocking: runs file reads off the reactor (the fleet's thread pool).
    :param tls: the TLS material; ``None`` only in tests (nothing is checked).
    :param pods: the pods ``GET /pods`` lists (none without it).
    """
    logs = ConsoleLogs(reactor, blocking, console_path, console_log_size)
    site = Site(KubeletResource(reactor, resolver, guests, logs, tls, pods))
    site.displayTracebacks = False
    return site


__all__ = ["Guests", "KubeletListener", "KubeletResource", "NotImplementedHere", "kubelet_site"]
