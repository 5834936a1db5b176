# -*- test-case-name: tests.nodes.test_fakes,tests.agent.test_client -*-
"""
What a node's guest offers: the one interface through which everything above
the domain works inside a VM, and the records that cross it.

:class:`IGuest` is what :meth:`vmservice.nodes.fleet.Fleet.guest` hands out
for a running node: its health and clock, exec, file copies both ways and
file-system operations, file watching, interactive shells and tunnels.
:class:`IGuestConnection` adds what the fleet needs to run a node's agent
connection.  ``vmservice.agent`` implements both over the agent channel; the
API and the fleet know only these interfaces, and the tests stand fakes in
for them (checked with ``verifyObject``).

The records and interfaces of each operation live in a module of their own:
:mod:`.exec` (exec), :mod:`.files` (copies both ways and file-system
entries), :mod:`.watch` (file watching), :mod:`.shell` (interactive shells),
:mod:`.tunnel` (tunnels) and :mod:`.background` (background execs); this
module holds the interfaces and the records of health and provisioning.

Failures of guest operations are :class:`vmservice.errors.AgentError`\\ s with
a :class:`~vmservice.errors.GuestErrorKind`; what they mean for a client is
the one table :data:`vmservice.errors.GUEST_ERRORS`.
"""

from __future__ import annotations

from typing import Callable

from attrs import frozen
from twisted.internet.defer import Deferred
from zope.interface import Attribute, Interface

from ..errors import AgentError
from .exec import ExecRequest, IExecProcess, IExecSink
from .files import DownloadRequest, FsEntry, IDownload, IUpload, UploadRequest
from .shell import IShellSession, IShellSink, ShellRequest
from ..wire.upstream import Upstream
from .tunnel import ITunnel
from .watch import IWatch, IWatchSink, WatchRequest


@frozen
class AgentHealth:
    """
    The agent's answer to a health request.

    :ivar agent_uptime: nanoseconds since the agent started.
    :ivar agent_version: the vmservice version inside the guest image.
    :ivar system_uptime: nanoseconds since the guest kernel booted.
    :ivar userdata_ran: whether the node's userdata is over (at once for a
        node without userdata).
    :ivar userdata_exit_code: its exit code once it exited; None before, for
        none, or when a reboot interrupted it.
    """

    agent_uptime: int
    agent_version: str
    system_uptime: int
    userdata_ran: bool
    userdata_exit_code: int | None = None


@frozen
class GuestSecret:
    """
    A secret as placed in the guest (``/run/secrets/<name>``).

    :ivar name: the file's name.
    :ivar data: its content.
    :ivar mode: its permission bits.
    :ivar uid: its owner.
    :ivar gid: its group.
    """

    name: str
    data: bytes
    mode: int
    uid: int
    gid: int


@frozen
class UserdataOutcome:
    """
    How the node's userdata ended.

    :ivar state: ``finished`` or ``interrupted`` (the VM went down while it ran).
    :ivar exit_code: the script's exit status; None when interrupted or when
        there was no script.
    :ivar ran_script: whether there was a script to run.
    """

    state: str
    exit_code: int | None
    ran_script: bool


@frozen
class LoginOutcome:
    """
    The login user as the guest has it.

    :ivar user: its name.
    :ivar uid: its user id.
    :ivar home: its home directory.
    :ivar created: whether it was just created.
    :ivar sshd: the SSH server: ``started``, ``running``, ``absent`` (the image
        has none) or ``off`` (no keys, so not started).
    """

    user: str
    uid: int
    home: str
    created: bool
    sshd: str


class IGuest(Interface):
    """
    The operations of one guest.  Each fails with an
    :class:`~vmservice.errors.AgentError` (kind ``UNAVAILABLE`` when the agent
    is not connected); none waits for a connection.
    """

    async def health() -> AgentHealth:
        """Ask the agent how it is."""

    async def set_clock(unix_ns: int) -> int:
        """Set the guest's wall clock; fires with the guest's time just before."""

    async def place_secrets(secrets: "tuple[GuestSecret, ...]") -> tuple[str, ...]:
        """Make ``/run/secrets`` hold exactly ``secrets``; fires with the names removed."""

    async def run_userdata(script: bytes) -> UserdataOutcome:
        """Run the node's userdata unless it ran before; fires once it is over."""

    async def login(user: str, keys: "tuple[str, ...]") -> LoginOutcome:
        """Make ``user`` (when missing), install its SSH keys, start the SSH server when there are keys."""

    background = Attribute(
        "Its background execs, a vmservice.guestport.background.IBackgroundExecs: processes that run on their own, "
        "their output kept in the guest."
    )

    def exec(request: ExecRequest, sink: IExecSink) -> IExecProcess:
        """Start ``request``; what happens to it goes to ``sink``."""

    def upload(request: UploadRequest) -> IUpload:
        """Start a copy into the guest."""

    def download(request: DownloadRequest) -> IDownload:
        """Start a copy out of the guest."""

    async def stat(path: str, details: bool = False) -> FsEntry:
        """Describe ``path`` itself (a symlink is not followed); with ``details``, its owner, target and metadata."""

    async def readdir(path: str, details: bool = False) -> list[FsEntry]:
        """The entries of directory ``path``, sorted by name; with ``details``, as :meth:`stat`'s."""

    async def make_directory(path: str, mode: int, uid: int, gid: int) -> FsEntry:
        """
        Make directory ``path`` and its missing parents, owned by ``uid``/``gid``;
        fires with its detailed entry (fails ``EXISTS`` when it is a directory already).
        """

    async def rename(source: str, destination: str, uid: int, gid: int) -> FsEntry:
        """Rename ``source`` to ``destination`` (missing parents made, owned by ``uid``/``gid``); its detailed entry."""

    async def set_metadata(path: str, metadata: "tuple[tuple[str, str], ...]") -> FsEntry:
        """Set ``path``'s ``user.e2b.<key>`` attributes; fires with its detailed entry."""

    async def mkdir(path: str, recursive: bool, mode: int) -> FsEntry:
        """Make directory ``path`` (with ``recursive``, its parents; an existing one is fine)."""

    async def remove(path: str, recursive: bool) -> FsEntry:
        """Remove a file, symlink or empty directory (with ``recursive``, a tree); fires with what it was."""

    def watch(request: WatchRequest, sink: IWatchSink) -> IWatch:
        """Start watching; the events go to ``sink``."""

    def shell(request: ShellRequest, sink: IShellSink) -> IShellSession:
        """Start an interactive shell; what happens to it goes to ``sink``."""

    def forward(request: Upstream) -> "Deferred[ITunnel]":
        """
        Open a tunnel to ``request``'s upstream in the guest; fails with an
        AgentError (kinds ``UPSTREAM_REFUSED``, ``UPSTREAM_UNREACHABLE``,
        ``UPSTREAM_TIMEOUT``, ``NOT_FOUND`` for a missing UNIX socket, ``INVALID``)
        when the guest cannot connect.
        """


class IGuestConnection(IGuest):
    """A guest's agent connection, as the fleet runs it."""

    connected = Attribute("Whether the agent answers now (its HELLO acknowledged this connection).")

    def start() -> None:
        """Begin connecting, and reconnecting whenever the connection drops."""

    def stop() -> Deferred[None]:
        """Stop reconnecting and drop the connection; fires once it is closed."""

    def when_ready() -> Deferred[None]:
        """Fire as soon as the agent answers (at once if it does); cancel to stop waiting."""

    def on_ready(callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` each time the agent answers on a new connection or after it restarted; returns a stop."""

    def on_lost(callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` each time an agent that answered is lost (its connection dropped, it restarted); returns a stop."""

    def moved_to(socket_path: str) -> None:
        """The VM's agent socket was renamed to ``socket_path`` (a spare VM's, into its node's directory): the connection stays, later ones go there."""

    def interrupt(error: AgentError) -> None:
        """
        Cut the current connection off: every operation under way in the
        guest fails with ``error`` (whose kind says why, for the client);
        connecting goes on as after any loss (the guest's agent ends what
        the cut-off operations were doing when it hears of it).
        """


__all__ = [
    "AgentHealth",
    "GuestSecret",
    "IGuest",
    "IGuestConnection",
    "LoginOutcome",
    "UserdataOutcome",
]
