"""
The guest agent run as a process on this machine: its program (:data:`AGENT`) and a process protocol
that keeps its output and fires when the agent is ready and when it ends (:class:`AgentProcess`).
"""

from __future__ import annotations

import os

from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

from vmservice.guest import agent

AGENT = os.path.abspath(agent.__file__)


class AgentProcess(ProcessProtocol):
    """
    A spawned agent: its output, readiness and end.
    """

    def __init__(self) -> None:
        self.stdout = b""
        self.stderr = b""
        self.ready: Deferred[None] = Deferred()
        self.ended: Deferred[None] = Deferred()
        self.running = True

    def outReceived(self, data: bytes) -> None:
        self.stdout += data
        if b"vmservice-agent: ready on " in self.stdout and not self.ready.called:
            self.ready.callback(None)

    def errReceived(self, data: bytes) -> None:
        self.stderr += data

    def processEnded(self, reason: Failure) -> None:
        self.running = False
        if not self.ready.called:
            self.ready.errback(RuntimeError(f"agent exited: {self.stderr.decode(errors='replace')}"))
        self.ended.callback(None)
