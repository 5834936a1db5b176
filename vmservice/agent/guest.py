# -*- test-case-name: tests.agent.test_client -*-
"""
:class:`~vmservice.guestport.guest.IGuest` over an agent channel.

:class:`AgentGuest` turns each guest operation into the streams of the agent
protocol (``docs/agent-protocol.md``): health and clock are one-shot
requests, exec and copies are streams with flow control
(:mod:`.execution`, :mod:`.copying`), file-system operations one-shot
requests (:mod:`.filesystem`), a watch a stream of events (:mod:`.watching`), a shell a
stream of terminal frames (:mod:`.shell`), a tunnel a byte stream (:mod:`.forwarding`).  A subclass provides the channel:
:class:`~.client.AgentClient` over its connection, tests over fakes.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any, Mapping, Optional

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IProtocol, IReactorTime
from zope.interface import implementer

from ..errors import AgentError
from ..guestport.exec import ExecRequest, IExecProcess, IExecSink
from ..guestport.files import DownloadRequest, FsEntry, IDownload, IUpload, UploadRequest
from ..guestport.guest import AgentHealth, GuestSecret, IGuest, LoginOutcome, UserdataOutcome
from ..guestport.shell import IShellSession, IShellSink, ShellRequest
from ..guestport.tunnel import ITunnel
from ..wire.openheaders.clock import ClockHeader
from ..wire.upstream import Upstream
from ..guestport.watch import IWatch, IWatchSink, WatchRequest
from . import filesystem, provisioning
from .background import AgentBackground
from .bulk import BulkChannel
from .bulkcopy import BulkDownload, BulkUpload
from .copying import start_download, start_upload
from .errors import AgentRequestFailed
from .execution import start_exec
from .shell import start_shell
from .forwarding import start_forward
from .port_tunnel import open_forward
from .tunnelports import TunnelPorts
from .stream import AgentStream
from .watching import start_watch

#: Largest health reply accepted, in bytes.
MAX_HEALTH_REPLY = 64 * 1024
#: Largest clock reply accepted, in bytes.
MAX_CLOCK_REPLY = 4 * 1024
#: The ``clock`` op accepts positive times below this (signed 64-bit nanoseconds).
_CLOCK_LIMIT = 2**63

_HEALTH_FIELDS = {"agent_uptime": int, "agent_version": str, "system_uptime": int, "userdata_ran": bool}


def parse_health(body: bytes) -> AgentHealth:
    """
    The agent's health reply.

    :raises AgentRequestFailed: it is not the expected JSON object.
    """
    try:
        record = json.loads(body)
    except ValueError:
        raise AgentRequestFailed("health reply is not JSON") from None
    if not isinstance(record, dict):
        raise AgentRequestFailed("health reply is not a JSON object")
    for key, kind in _HEALTH_FIELDS.items():
        value = record.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise AgentRequestFailed(f"health reply has no valid {key!r}")
    return AgentHealth(
        agent_uptime=record["agent_uptime"],
        agent_version=record["agent_version"],
        system_uptime=record["system_uptime"],
        userdata_ran=record["userdata_ran"],
        userdata_exit_code=exit_code if type(exit_code := record.get("userdata_exit_code")) is int else None,
    )


@implementer(IGuest)
class AgentGuest(ABC):
    """The operations of one guest, through its agent's channel."""

    @abstractmethod
    def open_stream(self, header: Mapping[str, Any], protocol: IProtocol) -> AgentStream:
        """
        Open a stream for ``header`` served by ``protocol``.

        :raises vmservice.agent.errors.AgentUnavailable: the agent is not connected.
        """

    @abstractmethod
    async def request(self, header: Mapping[str, Any], limit: int, body: bytes = b"") -> bytes:
        """
        Open a stream, send ``body`` (nothing by default) and return what the
        agent sends until it half-closes (at most ``limit`` bytes).
        """

    async def health(self) -> AgentHealth:
        """Ask the agent for its health."""
        return parse_health(await self.request({"op": "health"}, MAX_HEALTH_REPLY))

    async def set_clock(self, unix_ns: int) -> int:
        """
        Set the guest's wall clock, e.g. after the VM was paused, suspended or
        restored from a snapshot (the guest's clock stood still meanwhile).

        :param unix_ns: the new time, integer nanoseconds since the Unix epoch.
        :return: the guest's clock just before it was set.
        :raises ValueError: ``unix_ns`` is not a positive integer below 2^63
            (checked before anything is sent).
        :raises AgentRequestFailed: the agent refuses (a time the guest kernel
            does not accept) or fails the request, or answers nonsense.
        """
        if isinstance(unix_ns, bool) or not isinstance(unix_ns, int) or not 0 < unix_ns < _CLOCK_LIMIT:
            raise ValueError(f"unix_ns must be a positive integer below 2**63, not {unix_ns!r}")
        body = await self.request(ClockHeader(int(unix_ns)).to_json(), MAX_CLOCK_REPLY)
        try:
            reply = json.loads(body)
        except ValueError:
            raise AgentRequestFailed("clock reply is not JSON") from None
        previous = reply.get("previous_ns") if isinstance(reply, dict) else None
        if type(previous) is not int:
            raise AgentRequestFailed("clock reply has no valid 'previous_ns'")
        return previous

    async def place_secrets(self, secrets: tuple[GuestSecret, ...]) -> tuple[str, ...]:
        """Make ``/run/secrets`` hold exactly ``secrets``; fires with the names removed."""
        return await provisioning.place_secrets(self, secrets)

    async def run_userdata(self, script: bytes) -> UserdataOutcome:
        """Run the node's userdata unless it ran before; fires once it is over."""
        return await provisioning.run_userdata(self, script)

    async def login(self, user: str, keys: tuple[str, ...]) -> LoginOutcome:
        """Make ``user`` (when missing), install its SSH keys, start the SSH server when there are keys."""
        return await provisioning.login(self, user, keys)

    @property
    def background(self) -> AgentBackground:
        """The guest's background execs."""
        return AgentBackground(self)

    def exec(self, request: ExecRequest, sink: IExecSink) -> IExecProcess:
        """Start ``request``; what happens to it goes to ``sink``."""
        return start_exec(self, request, sink)

    #: The guest's bulk port, if it has one (binary copies take it when it is free).
    bulk_channel: Optional[BulkChannel] = None
    #: The guest's tunnel ports, if it has any (a tunnel takes a free one, else its stream).
    tunnel_ports: Optional[TunnelPorts] = None
    #: Times what waits on the guest (a tunnel's end after its client left).
    clock: IReactorTime

    def upload(self, request: UploadRequest) -> IUpload:
        """Start a copy into the guest (a binary one over the bulk port when it is free)."""
        bulk = self.bulk_channel
        if bulk is None or request.mode != "binary" or not bulk.available:
            return start_upload(self, request)
        upload = BulkUpload(self, bulk, request)
        Deferred.fromCoroutine(upload.open()).addErrback(upload._settle)
        return upload

    def download(self, request: DownloadRequest) -> IDownload:
        """Start a copy out of the guest (a binary one over the bulk port when it is free)."""
        bulk = self.bulk_channel
        if bulk is None or request.mode == "tar" or not bulk.available:
            return start_download(self, request)
        download = BulkDownload(bulk)
        Deferred.fromCoroutine(download.open(self, request)).addErrback(download._head_failed)
        return download

    async def stat(self, path: str, details: bool = False) -> FsEntry:
        """Describe ``path`` itself (a symlink is not followed); with ``details``, its owner, target and metadata."""
        return await filesystem.stat(self, path, details)

    async def readdir(self, path: str, details: bool = False) -> list[FsEntry]:
        """The entries of directory ``path``, sorted by name (with ``details``, as :meth:`stat`'s)."""
        return await filesystem.readdir(self, path, details)

    async def make_directory(self, path: str, mode: int, uid: int, gid: int) -> FsEntry:
        """Make directory ``path`` and its missing parents, owned by ``uid``/``gid``."""
        return await filesystem.make_directory(self, path, mode, uid, gid)

    async def rename(self, source: str, destination: str, uid: int, gid: int) -> FsEntry:
        """Rename ``source`` to ``destination``, missing parents made owned by ``uid``/``gid``."""
        return await filesystem.rename(self, source, destination, uid, gid)

    async def set_metadata(self, path: str, metadata: tuple[tuple[str, str], ...]) -> FsEntry:
        """Set ``path``'s ``user.e2b.<key>`` attributes."""
        return await filesystem.set_metadata(self, path, metadata)

    async def mkdir(self, path: str, recursive: bool, mode: int) -> FsEntry:
        """Make directory ``path`` with exactly ``mode`` (with ``recursive``, its parents too)."""
        return await filesystem.mkdir(self, path, recursive, mode)

    async def remove(self, path: str, recursive: bool) -> FsEntry:
        """Remove a file, symlink or empty directory (with ``recursive``, a tree)."""
        return await filesystem.remove(self, path, recursive)

    def watch(self, request: WatchRequest, sink: IWatchSink) -> IWatch:
        """Start watching; the events go to ``sink``."""
        return start_watch(self, request, sink)

    def shell(self, request: ShellRequest, sink: IShellSink) -> IShellSession:
        """Start an interactive shell; what happens to it goes to ``sink``."""
        return start_shell(self, request, sink)
    def forward(self, request: Upstream) -> "Deferred[ITunnel]":
        """Open a tunnel to an upstream in the guest (fires once the guest connected)."""
        ports = self.tunnel_ports
        if ports is None or not ports.present:
            try:
                return start_forward(self, request, self.clock)
            except AgentError as e:
                return fail(e)
        return Deferred.fromCoroutine(open_forward(self, request, ports, self.clock))


__all__ = ["AgentGuest", "MAX_CLOCK_REPLY", "MAX_HEALTH_REPLY", "parse_health"]
