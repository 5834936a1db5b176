"""
What the tests of the data plane's services share: :class:`EnvdCase`, a
site over fake nodes (:class:`~tests.e2b.hosts.FakeHost`) serving the RPC
methods and plain routes a test names, a running sandbox whose guest is the
test's fake, and requests to it: unary calls, streams read back as
envelopes, plain requests, on connections the test may keep open.
"""

from __future__ import annotations

import json
from typing import Any, Coroutine, Mapping, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.api.connections import open_connection, parse_response
from tests.e2b.hosts import CONFIG, make_sandboxes
from vmservice.config import ApiConfig, AuthConfig, Config
from vmservice.e2b.connect import EnvelopeDecoder, envelope
from vmservice.e2b.data_plane import PlainHandler, RpcMethod
from vmservice.e2b.inputs import NewSandbox
from vmservice.e2b.site import e2b_site
from vmservice.guestport.guest import IGuest

T = TypeVar("T")


class EnvdCase(SynchronousTestCase):
    """
    A data plane serving :attr:`methods` and :attr:`plain`, and one running
    sandbox (:attr:`sandbox_id`, :attr:`token`) whose guest is :attr:`guest`
    (set it before :meth:`setUp` runs, or in an override of :meth:`make_guest`).
    """

    methods: Mapping[str, RpcMethod] = {}
    plain: Mapping[tuple[bytes, str], PlainHandler] = {}
    env_vars: tuple[tuple[str, str], ...] = ()

    def make_guest(self) -> IGuest | None:
        """The sandbox's guest (``None``: its agent does not answer)."""
        return None

    def setUp(self) -> None:
        self.sandboxes, self.host, self.clock, _ = make_sandboxes(self)
        config = Config(api=ApiConfig(auth=AuthConfig(enabled=False)))
        self.site = e2b_site(self.clock, config, CONFIG, self.sandboxes, self.host, None, self.methods,
                             self.plain).wrappedFactory
        view = self.successResultOf(_deferred(self.sandboxes.create(NewSandbox("base", env_vars=self.env_vars))))
        self.sandbox_id, self.token = view.sandbox.sandbox_id, view.sandbox.access_token
        guest = self.make_guest()
        if guest is not None:
            self.host.guests[self.sandbox_id] = guest

    def send(self, method: str, path: str, content: bytes = b"", headers: Mapping[str, str] | None = None,
             sandbox: bool = True) -> tuple[Any, StringTransport]:
        """
        One request on a new connection, left open: its channel and
        transport.  It carries the sandbox's id and token unless ``headers``
        say otherwise (``sandbox=False``: neither).
        """
        channel, transport = open_connection(self, self.site)
        channel.callLater = self.clock.callLater
        sent = {"Host": "127.0.0.1:49982", "Content-Length": str(len(content))}
        if sandbox:
            sent.update({"E2b-Sandbox-Id": self.sandbox_id, "E2b-Sandbox-Port": "49983",
                         "X-Access-Token": self.token})
        sent.update(headers or {})
        head = "".join(f"{name}: {value}\r\n" for name, value in sent.items() if value is not None)
        channel.dataReceived(f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode() + content)
        self.clock.advance(0)
        return channel, transport

    def unary(self, path: str, message: Mapping[str, Any],
              headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        """A unary call: its status and JSON answer."""
        _, transport = self.send("POST", path, json.dumps(message).encode(),
                                 {"Content-Type": "application/json", "Connect-Protocol-Version": "1",
                                  **(headers or {})})
        status, _, body = parse_response(transport.value())
        return status, json.loads(body) if body else None

    def open_stream(self, path: str, message: Mapping[str, Any],
                    headers: Mapping[str, str] | None = None) -> tuple[Any, StringTransport]:
        """A server-streaming call, left open: its channel and transport (read them with :func:`messages`)."""
        return self.send("POST", path, envelope(message),
                         {"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
                          **(headers or {})})


def messages(transport: StringTransport) -> tuple[int, list[Any], Any]:
    """
    A stream's response so far: its status, its messages and its end
    (the end envelope's JSON, ``None`` while it has not ended).
    """
    status, _, body = parse_response(transport.value())
    read, end = [], None
    for item in EnvelopeDecoder().feed(body):
        if item.flags & 0x02:
            end = json.loads(item.data)
        else:
            read.append(json.loads(item.data))
    return status, read, end


def _deferred(coroutine: Coroutine[Any, Any, T]) -> Deferred[T]:
    return Deferred.fromCoroutine(coroutine)
