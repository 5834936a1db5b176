"""
Tunnels through the whole host stack (the forward route on a real
:class:`~vmservice.api.streaming.StreamingSite` over TCP, an
:class:`~vmservice.agent.client.AgentClient`) to the real guest agent run as a
process on this machine (``--listen-unix``), with blocking clients in threads:
32 tunnels at once, each echoing its own bytes.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Any

from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.integration.echo_server import echo_server
from tests.integration.guest.agent_process import AGENT, AgentProcess
from tests.short_dirs import temp_dir
from vmservice.agent.client import AgentClient
from vmservice.api.app import Api
from vmservice.api.forwarding import ForwardApi
from vmservice.api.streaming import StreamingSite
from vmservice.metrics import Metrics


class _OneGuest:
    def __init__(self, guest: AgentClient) -> None:
        self._guest = guest

    async def guest(self, hostname: str) -> AgentClient:
        return self._guest


def _tunnel_echo(port: int, upstream: str, payload: bytes) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET /vm/demo-1/forward HTTP/1.1\r\nHost: x\r\nX-Inlets-Upstream: {upstream}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(1)
            if not chunk:
                return False
            head += chunk
        if not head.startswith(b"HTTP/1.1 200 OK\r\n"):
            return False
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        got = bytearray()
        while len(got) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
        sender.join()
        return bytes(got) == payload


class ForwardThroughAgentProcessTests(TestCase):
    timeout = 120

    async def test_parallel(self) -> None:
        """32 tunnels at once, each echoing its own 1 MiB intact."""
        directory = temp_dir(self)
        path = os.path.join(directory, "agent.sock")
        process = AgentProcess()
        global_reactor.spawnProcess(process, sys.executable,  # type: ignore[attr-defined]
                                    [sys.executable, "-I", "-S", AGENT, "--listen-unix", path], env={},
                                    path=directory)

        def kill() -> Deferred[None]:
            if process.running:
                process.transport.signalProcess("KILL")
            return process.ended

        self.addCleanup(kill)
        await process.ready
        client = AgentClient(global_reactor, path)  # type: ignore[arg-type]
        client.start()
        self.addCleanup(client.stop)
        await client.when_ready()
        api = Api(global_reactor, ForwardApi(_OneGuest(client)).routes(), Metrics(), None)  # type: ignore[arg-type]
        site = StreamingSite(api.resource(), api.plan_body)
        port = global_reactor.listenTCP(0, site, interface="127.0.0.1")  # type: ignore[attr-defined]
        self.addCleanup(port.stopListening)
        server = echo_server()
        self.addCleanup(server.close)
        upstream = f"127.0.0.1:{server.getsockname()[1]}"
        calls: list[Deferred[Any]] = [
            deferToThread(_tunnel_echo, port.getHost().port, upstream, os.urandom(1024 * 1024)) for _ in range(32)
        ]
        results = [await call for call in calls]
        self.assertEqual(results, [True] * 32)
