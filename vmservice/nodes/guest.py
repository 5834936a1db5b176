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

Failures of guest operations are :class:`vmservice.errors.AgentError`\\ s with
a :class:`~vmservice.errors.GuestErrorKind`; what they mean for a client is
the one table :data:`vmservice.errors.GUEST_ERRORS`.
"""

from __future__ import annotations

from typing import Callable

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from zope.interface import Attribute, Interface

from ..errors import AgentError


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


@frozen
class ExecRequest:
    """
    One command to run in the guest.

    :ivar cmd: a command line for ``shell``, or the program when ``shell`` is empty.
    :ivar args: extra words: quoted and appended (shell) or the argv (no shell).
    :ivar env: ``KEY=VALUE`` entries laid over the guest's default environment.
    :ivar uid: user id (0 = root).
    :ivar gid: group id.
    :ivar cwd: working directory (absolute, ``~``, ``~/x`` or relative to the home).
    :ivar shell: the shell, ``""`` for none.
    :ivar umask: the process's umask, ``None`` to keep the agent's (022).
    :ivar stdin: whether stdin is fed from the host (else ``/dev/null``).
    :ivar stdout: whether stdout comes back.
    :ivar stderr: whether stderr comes back.
    """

    cmd: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    uid: int = 0
    gid: int = 0
    cwd: str = ""
    shell: str = "/bin/bash"
    umask: int | None = None
    stdin: bool = False
    stdout: bool = True
    stderr: bool = True


class IExecSink(Interface):
    """
    Receives what happens to one exec, in order.  Exactly one of
    :meth:`exited`, :meth:`failed` or :meth:`lost` ends it.
    """

    def started(pid: int) -> None:
        """The process runs with ``pid`` (in the guest)."""

    def output(name: str, data: bytes) -> None:
        """The process wrote ``data`` on ``name`` (``stdout`` or ``stderr``)."""

    def exited(exit_code: int, signal: str | None) -> None:
        """The process ended; ``signal`` names the one that killed it, if any."""

    def failed(message: str, exit_code: int) -> None:
        """The process could not be started (127: not found, 126: otherwise)."""

    def lost(error: AgentError) -> None:
        """
        The exec ended without a last record: the guest refused the request
        before starting anything (kind ``REJECTED``: a bad ``cwd`` ...), the
        stream was reset, the agent went away.
        """


class IExecProcess(IPushProducer):
    """
    A running exec, as the caller sees it.  As an ``IPushProducer`` it
    controls the *output*: pausing it withholds credit from the guest, which
    stops reading the process's pipes, which blocks the process;
    ``stopProducing`` kills it.
    """

    def write_stdin(data: bytes) -> None:
        """Send ``data`` to the process's stdin (buffered until the guest takes it)."""

    def close_stdin() -> None:
        """EOF on stdin, after what was written."""

    def register_stdin_producer(producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take stdin."""

    def unregister_stdin_producer() -> None:
        """Forget the stdin producer."""

    def kill() -> None:
        """The guest kills the process group (SIGTERM, then SIGKILL)."""


@frozen
class UploadRequest:
    """
    One copy into the guest.

    :ivar path: the guest path (absolute or ``~``/``~/...``; ``~`` is the
        home directory of ``uid``, root's when it is ``None``).
    :ivar mode: ``binary`` (the body is the file) or ``tar``.
    :ivar uid: owner, ``None`` for the default (the replaced file's, else root).
    :ivar gid: group, ``None`` for the default.
    :ivar permissions: the file's mode (binary) or the directory's (tar), or ``None``.
    :ivar semantics: ``legacy`` (``path`` is the file or directory itself) or
        ``cp-v1`` (placed like ``cp`` would, see ``docs/api.md``).
    :ivar source_name: cp-v1: the base name of what was copied.
    :ivar copy_contents: cp-v1: the directory's contents go into ``path``.
    :ivar exclude: patterns of tar entries left out.
    :ivar unpacked_size: bytes the upload unpacks to, checked against the
        guest's free space before anything is written.
    """

    path: str
    mode: str = "binary"
    uid: int | None = None
    gid: int | None = None
    permissions: int | None = None
    semantics: str = "legacy"
    source_name: str | None = None
    copy_contents: bool = False
    exclude: tuple[str, ...] = ()
    unpacked_size: int | None = None


@frozen
class UploadResult:
    """
    What the guest wrote.

    :ivar path: the file or directory written (``~`` expanded).
    :ivar size: body bytes received.
    :ivar entries: tar entries extracted (``None`` for binary).
    """

    path: str
    size: int
    entries: int | None = None


class IUpload(Interface):
    """
    A copy into the guest in progress: write the body, end it, await
    :attr:`result` (which may fail before the body was all sent).
    """

    result = Attribute("A Deferred firing with the UploadResult, or failing with an AgentError.")

    def write(data: bytes) -> None:
        """Send body bytes (buffered until the guest takes them)."""

    def register_producer(producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take more."""

    def unregister_producer() -> None:
        """Forget the producer."""

    def end() -> None:
        """The body is complete: the guest may commit it."""

    def abort() -> None:
        """Give up: the guest removes what it was writing."""


@frozen
class DownloadRequest:
    """
    One copy out of the guest.

    :ivar path: the guest path.
    :ivar mode: ``binary`` (a file's bytes), ``tar``, or ``recursive``
        (``binary`` for a file, ``tar`` for a directory).
    :ivar semantics: ``legacy`` or ``cp-v1`` (``tar`` is then for directories only).
    :ivar exclude: patterns of entries left out of a tar.
    :ivar uid: whose home directory ``~`` is (root's when ``None``).
    """

    path: str
    mode: str = "binary"
    semantics: str = "legacy"
    exclude: tuple[str, ...] = ()
    uid: int | None = None


@frozen
class DownloadHead:
    """
    What the guest says before the content.

    :ivar type: ``file`` or ``directory`` (the source, not the stream's format).
    :ivar name: the source's base name.
    :ivar mode: the source's permission bits.
    :ivar size: bytes that follow for a non-empty binary file, else ``None``.
    """

    type: str
    name: str
    mode: int
    size: int | None


class IDownload(IPushProducer):
    """
    A copy out of the guest in progress, and the push producer of its content:
    pausing it withholds credit from the guest, which stops its reads.
    """

    head = Attribute("A Deferred firing with the DownloadHead, or failing with an AgentError.")
    done = Attribute(
        "A Deferred firing once all content was delivered, or failing with an AgentError of kind INTERRUPTED."
    )

    def deliver_to(write: Callable[[bytes], None]) -> None:
        """Send the content to ``write`` from now on (what arrived already first)."""

    def abort() -> None:
        """Stop the copy (the guest stops); :attr:`done` is left unfired."""


@frozen
class FsEntry:
    """
    One file-system entry as the guest saw it (``lstat``: a symlink is itself).

    :ivar name: the base name (``/`` for the root); bytes that are not UTF-8
        arrive as U+FFFD.
    :ivar type: ``file``, ``directory``, ``symlink``, ``char_device``,
        ``block_device``, ``fifo``, ``socket`` or ``other``.
    :ivar size: ``st_size`` in bytes.
    :ivar mtime_ns: modification time, integer nanoseconds since the Unix epoch.
    :ivar mode: permission bits including setuid, setgid and sticky.
    """

    name: str
    type: str
    size: int
    mtime_ns: int
    mode: int


#: The event types a watch may ask for (``overflow`` is always reported).
WATCH_EVENT_TYPES = ("create", "write", "remove", "rename", "chmod")


@frozen
class WatchRequest:
    """
    What to watch in the guest.

    :ivar paths: absolute, or ``~``/``~/...`` (the home of ``uid``).
    :ivar patterns: globs on an entry's base name; empty for every name.
    :ivar events: the types reported (of :data:`WATCH_EVENT_TYPES`); empty for all.
    :ivar recursive: watch every directory below, and new ones as they appear.
    :ivar debounce: seconds within which events of one type and path become one; 0 for none.
    :ivar uid: whose home directory ``~`` is.
    """

    paths: tuple[str, ...]
    patterns: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    recursive: bool = False
    debounce: float = 0.0
    uid: int = 0


@frozen
class WatchEvent:
    """
    One file-system event in the guest.

    :ivar type: ``create``, ``write``, ``remove``, ``rename``, ``chmod``, or
        ``overflow`` (events were lost; :attr:`message` says why).
    :ivar path: the entry's path in the guest (``""`` for an overflow).
    :ivar size: the entry's size when the guest sent the event (0 for
        ``remove`` and ``rename``).
    :ivar is_dir: whether the entry is a directory.
    :ivar message: why events were lost, for an overflow.
    """

    type: str
    path: str
    size: int
    is_dir: bool
    message: str | None = None


class IWatchSink(Interface):
    """Receives the events of one watch, in order, then its end (once)."""

    def event(event: WatchEvent) -> None:
        """Something happened in the guest."""

    def ended(error: AgentError | None) -> None:
        """
        The watch is over: ``None`` when the guest ended it (nothing it watched
        is left), else why it was lost.  Not called for a watch that never got
        ready, nor after :meth:`IWatch.cancel`.
        """


class IWatch(IPushProducer):
    """
    A watch in progress.  As an ``IPushProducer`` it controls the events:
    pausing it withholds credit from the guest, which drops what it cannot
    send and reports an ``overflow`` once the host catches up.
    """

    ready = Attribute(
        "A Deferred firing once the guest watches every path, or failing with an AgentError "
        "(kind NOT_FOUND for a missing path, ...)."
    )

    def cancel() -> None:
        """Stop watching: the guest removes every watch."""


@frozen
class ShellRequest:
    """
    An interactive login shell on a terminal in the guest.

    :ivar uid: user id (0 = root).
    :ivar gid: group id.
    :ivar shell: the shell program, run as ``shell -l``.
    :ivar cwd: working directory (as :class:`ExecRequest`'s; empty = the user's home).
    :ivar cols: the terminal's width at start.
    :ivar rows: the terminal's height at start.
    """

    uid: int = 0
    gid: int = 0
    shell: str = "/bin/bash"
    cwd: str = ""
    cols: int = 80
    rows: int = 24


class IShellSink(Interface):
    """
    Receives what happens to one shell, in order: :meth:`started` (or
    :meth:`lost`), terminal output, then exactly one of :meth:`exited` or :meth:`lost`.
    """

    def started(pid: int) -> None:
        """The shell runs with ``pid`` (in the guest)."""

    def output(data: bytes) -> None:
        """The terminal wrote ``data``."""

    def exited(exit_code: int, signal: str | None) -> None:
        """The shell ended and its output was delivered."""

    def lost(error: AgentError) -> None:
        """
        The shell ended otherwise: refused before it started (kind ``REJECTED``:
        a bad ``cwd`` or shell), hung up, the stream reset, the agent gone.
        """


class IShellSession(IPushProducer):
    """
    A running shell.  As an ``IPushProducer`` it controls the terminal's
    *output*: pausing withholds credit from the guest, which stops reading
    the terminal, which blocks the programs writing to it; ``stopProducing``
    hangs up.
    """

    def write(data: bytes) -> None:
        """Type ``data`` into the terminal (buffered until the guest takes it)."""

    def resize(cols: int, rows: int) -> None:
        """Set the terminal's size (the foreground program gets SIGWINCH)."""

    def register_input_producer(producer: IPushProducer) -> None:
        """Pause ``producer`` while the guest does not take input."""

    def unregister_input_producer() -> None:
        """Forget the input producer."""

    def hangup() -> None:
        """End the session: the guest sends SIGHUP to it, then SIGKILL."""
#: Longest UNIX socket path in the guest (``sun_path`` holds 108 bytes with its NUL).
MAX_UNIX_SOCKET_PATH = 107


@frozen
class ForwardRequest:
    """
    The upstream of a tunnel inside the guest: ``host``:``port`` over TCP, or
    the UNIX socket ``unix`` (then ``host`` is empty and ``port`` 0).
    """

    host: str = ""
    port: int = 0
    unix: str = ""

    def describe(self) -> str:
        """``host:port`` or ``unix:/path``, as clients write it."""
        if self.unix:
            return f"unix:{self.unix}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> "ForwardRequest":
        """
        Read ``host:port`` (``[v6 address]:port`` too) or ``unix:/absolute/path``.

        :raises ValueError: anything else, saying why.
        """
        if text.startswith("unix:"):
            path = text[5:]
            if not path.startswith("/") or "\0" in path:
                raise ValueError(f"a UNIX socket upstream needs an absolute path: {text!r}")
            if len(path.encode("utf-8", "surrogateescape")) > MAX_UNIX_SOCKET_PATH:
                raise ValueError(f"the UNIX socket path is longer than {MAX_UNIX_SOCKET_PATH} bytes")
            return cls(unix=path)
        host, colon, port = text.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not colon or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"the upstream must be host:port (port 1 to 65535) or unix:/path, not {text!r}")
        if any(c.isspace() or c in "\0/[]" for c in host) or len(host) > 253:
            raise ValueError(f"invalid upstream host {host!r}")
        return cls(host=host, port=int(port))


class ITunnel(IPushProducer):
    """
    An open byte tunnel to an upstream inside the guest (its connect succeeded).

    Join it to a peer with :meth:`join`: the peer's bytes go in through
    :meth:`write`, the guest's bytes come out through the peer's ``write``.  As
    an ``IPushProducer`` (of the guest's bytes) pausing it withholds credit
    from the guest, which stops reading the upstream socket.  There is no
    half-close: :meth:`close` or the upstream's end ends the whole tunnel.
    """

    done = Attribute("A Deferred firing once the tunnel is over (whichever side ended it); it never fails.")

    def join(peer: "ITunnelPeer") -> None:
        """Deliver the guest's bytes to ``peer`` from now on (what came already first)."""

    def write(data: bytes) -> None:
        """Send ``data`` to the upstream."""

    def register_producer(producer: IPushProducer) -> None:
        """Pause ``producer`` (the peer's reading) while the guest's credit is spent."""

    def close() -> None:
        """The peer is done: the guest closes the upstream once what was written reached it."""

    def abort() -> None:
        """Reset the tunnel now (the guest closes the upstream, dropping what waits)."""


class ITunnelPeer(Interface):
    """What a tunnel delivers the guest's bytes to: the peer side's transport, in effect."""

    def write(data: bytes) -> None:
        """Bytes from the upstream."""

    def registerProducer(producer: IPushProducer, streaming: bool) -> None:
        """The tunnel registers itself, so that a full peer pauses it."""

    def unregisterProducer() -> None:
        """The tunnel is over."""

    def loseConnection() -> None:
        """The tunnel is over: close the peer (after what was written)."""


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
        "Its background execs, a vmservice.nodes.background.IBackgroundExecs: processes that run on their own, "
        "their output kept in the guest."
    )

    def exec(request: ExecRequest, sink: IExecSink) -> IExecProcess:
        """Start ``request``; what happens to it goes to ``sink``."""

    def upload(request: UploadRequest) -> IUpload:
        """Start a copy into the guest."""

    def download(request: DownloadRequest) -> IDownload:
        """Start a copy out of the guest."""

    async def stat(path: str) -> FsEntry:
        """Describe ``path`` itself (a symlink is not followed)."""

    async def readdir(path: str) -> list[FsEntry]:
        """The entries of directory ``path``, sorted by name."""

    async def mkdir(path: str, recursive: bool, mode: int) -> FsEntry:
        """Make directory ``path`` (with ``recursive``, its parents; an existing one is fine)."""

    async def remove(path: str, recursive: bool) -> FsEntry:
        """Remove a file, symlink or empty directory (with ``recursive``, a tree); fires with what it was."""

    def watch(request: WatchRequest, sink: IWatchSink) -> IWatch:
        """Start watching; the events go to ``sink``."""

    def shell(request: ShellRequest, sink: IShellSink) -> IShellSession:
        """Start an interactive shell; what happens to it goes to ``sink``."""
    def forward(request: ForwardRequest) -> "Deferred[ITunnel]":
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


__all__ = [
    "AgentHealth",
    "DownloadHead",
    "DownloadRequest",
    "ExecRequest",
    "ForwardRequest",
    "FsEntry",
    "GuestSecret",
    "IDownload",
    "IExecProcess",
    "IExecSink",
    "IShellSession",
    "IShellSink",
    "IGuest",
    "IGuestConnection",
    "ITunnel",
    "ITunnelPeer",
    "LoginOutcome",
    "IUpload",
    "IWatch",
    "IWatchSink",
    "ShellRequest",
    "UploadRequest",
    "UploadResult",
    "UserdataOutcome",
    "WATCH_EVENT_TYPES",
    "WatchEvent",
    "WatchRequest",
]
