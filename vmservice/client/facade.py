# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
:class:`Client`, the whole HTTP API of one daemon in one object: the
families of calls (:mod:`~vmservice.client.meta`,
:mod:`~vmservice.client.nodes`, :mod:`~vmservice.client.lifecycle`,
:mod:`~vmservice.client.execs`, :mod:`~vmservice.client.background`,
:mod:`~vmservice.client.copies`, :mod:`~vmservice.client.filesystem`,
:mod:`~vmservice.client.watching`, :mod:`~vmservice.client.secrets`), each
a :class:`~vmservice.client.requests.Requests` of its own, put together,
plus the two ways that leave HTTP requests behind: a shell over a
WebSocket and tunnels as plain pipes.
"""

from __future__ import annotations

from .addresses import is_unix_socket, socket_path
from .background import BackgroundCalls
from .copies import CopyCalls
from .execs import ExecCalls
from .filesystem import FilesystemCalls
from .lifecycle import LifecycleCalls
from .meta import MetaCalls
from .nodes import NodeCalls
from .secrets import SecretCalls
from .shell import ShellSession, open_shell, shell_path
from .tunnel import TunnelEndpoint, daemon_endpoint
from .watching import WatchCalls

__all__ = ["Client"]


class Client(
    MetaCalls,
    NodeCalls,
    LifecycleCalls,
    ExecCalls,
    BackgroundCalls,
    CopyCalls,
    FilesystemCalls,
    WatchCalls,
    SecretCalls,
):
    """
    A connection to one vmservice daemon: every family of calls on one pool
    of connections (see :class:`~vmservice.client.requests.Requests` for
    the parameters: the reactor, the daemon's URL and the token).

    Connections are kept open between calls; :meth:`close` closes them.
    """

    def tunnel_endpoint(self, hostname: str, upstream: str) -> TunnelEndpoint:
        """
        A client endpoint whose connections are tunnels to ``upstream``
        (``host:port`` or ``unix:/path``) inside node ``hostname``, through
        ``GET /vm/{hostname}/forward`` as a plain byte pipe (see
        :mod:`vmservice.client.tunnel`).

        :raise ValueError: an ``https`` URL.
        """
        return TunnelEndpoint(daemon_endpoint(self._reactor, self.url), hostname, upstream, self._token)

    async def shell(
        self,
        hostname: str,
        *,
        uid: int | None = None,
        gid: int | None = None,
        shell: str | None = None,
        cwd: str | None = None,
    ) -> ShellSession:
        """
        Open an interactive shell in node ``hostname`` (``GET /vm/{hostname}/shell``,
        a WebSocket, over TCP or the UNIX socket): an open
        :class:`~vmservice.client.shell.ShellSession`::

            session = await client.shell("demo-1")
            session.resize(80, 24)
            session.write(b"ls\\r")
            while (chunk := await session.read()) is not None:
                ...

        :raise ShellError: the daemon refused (its status and ErrorResponse:
            404 no node, 409 paused, 400 bad cwd or shell ...), or could not be reached.
        """
        path = shell_path(hostname, uid, gid, shell, cwd)
        unix = socket_path(self.url) if is_unix_socket(self.url) else None
        return await open_shell(self._reactor, self._base, unix, self._token, path)
