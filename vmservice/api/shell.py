# -*- test-case-name: tests.api.test_shell -*-
"""
``GET /vm/{hostname}/shell``: an interactive shell over a WebSocket.

Before the upgrade the handler checks the request (:func:`.websocket.check_upgrade`),
finds the node's guest (404, 409 paused, 503 agent not connected) and starts
the shell in it, waiting for the guest's answer: a refused ``cwd`` or shell is
a 400.  Only then does it answer 101 (:func:`.websocket.accept`).

On the socket each binary message carries one frame of
:mod:`vmservice.wire.shellframes` (``docs/api.md`` documents them): client
DATA is typed into the terminal, WINDOW_SIZE resizes it, SHUTDOWN hangs up,
HEARTBEAT is ignored, as are text messages; the terminal's output comes
back as DATA messages of at most 32 KiB.  When the shell exits the server
sends SESSION_CLOSE and closes with 1000; when the client goes away the
guest hangs the session up (SIGHUP).

Back-pressure both ways: while the socket's send buffer is full the shell's
output is paused (no credit to the guest, which stops reading the terminal);
while the guest takes no input the socket is not read.
"""

from __future__ import annotations

from typing import Optional

from attrs import frozen
from twisted.internet.defer import CancelledError
from twisted.internet.interfaces import IReactorTime
from twisted.web.resource import IResource
from twisted.web.server import Request

from ..guestport.shell import ShellRequest
from ..nodes.fleet import Fleet
from .models.meta import ErrorResponse
from .query import Text, UserId, param
from .routing import Reply, Route
from .shell_bridge import ShellBridge, ShellProtocol
from .websocket import accept, check_upgrade
from vmservice.wire.shellframes import MAX_MESSAGE

#: The shell when the query names none (the contract's default).
DEFAULT_SHELL = "/bin/bash"


@frozen
class ShellQuery:
    """The query of a shell (see docs/api.md)."""

    uid: Optional[int] = param(UserId(), "User id (default 0; 4294967295 = not set)")
    gid: Optional[int] = param(UserId(), "Group id (default 0; 4294967295 = not set)")
    shell: Optional[str] = param(Text(), "Shell, run as a login shell (default /bin/bash)")
    cwd: str = param(Text(), "Working directory: absolute, ~, ~/dir or relative to the user's home", default="")

    def request(self) -> ShellRequest:
        """What to start in the guest."""
        return ShellRequest(uid=self.uid or 0, gid=self.gid or 0, shell=self.shell or DEFAULT_SHELL, cwd=self.cwd)


class ShellApi:
    """
    :param fleet: the nodes of this daemon.
    :param reactor: the reactor the WebSockets run on.
    """

    def __init__(self, fleet: Fleet, reactor: IReactorTime) -> None:
        self._fleet = fleet
        self._reactor = reactor

    def routes(self) -> list[Route]:
        return [
            Route(
                "GET", "/vm/{hostname}/shell", self.shell, "Interactive shell in the node (WebSocket)", "shell",
                {101: Reply("Switching Protocols: the WebSocket of the shell (binary frames, see docs/api.md)"),
                 400: Reply("Not a WebSocket upgrade, bad uid/gid, or a cwd or shell the guest cannot use",
                            ErrorResponse),
                 404: Reply("No such node", ErrorResponse),
                 409: Reply("The node is paused, stopped or suspended", ErrorResponse),
                 503: Reply("The node's agent is not connected", ErrorResponse)},
                query=ShellQuery,
                stream="shell",
            ),
        ]

    async def shell(self, request: Request, query: ShellQuery, hostname: str) -> IResource:
        check_upgrade(request)
        bridge = ShellBridge()
        session = (await self._fleet.guest(hostname)).shell(query.request(), bridge)
        bridge.session = session
        try:
            await bridge.ready
        except CancelledError:
            session.hangup()
            raise
        request.setResponseCode(101)
        return accept(self._reactor, lambda: ShellProtocol(bridge), MAX_MESSAGE)


__all__ = ["ShellApi", "ShellBridge", "ShellProtocol", "ShellQuery"]
