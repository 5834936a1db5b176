# -*- test-case-name: tests.e2b.test_watching -*-
"""
envd's directory watching over a sandbox's guest watch
(:meth:`~vmservice.guestport.guest.IGuest.watch`): the ``WatchDir`` stream
and the polling trio ``CreateWatcher``, ``GetWatcherEvents`` (the events so
far, then forgotten) and ``RemoveWatcher``, which the sync SDK uses.

``WatchDir`` answers ``{"start": {}}`` once the guest watches the
directory, then one ``{"filesystem": {"name", "type"}}`` per event:
``name`` relative to the watched directory, ``type`` one of
:data:`EVENT_TYPES` (as fsnotify's: a file written into the directory is a
create, then its writes).  The guest's ``overflow`` (events it dropped) is
not an envd event and is left out.

The polling watchers are the daemon's: :class:`Watchers` keeps each
sandbox's, at most :data:`MAX_WATCHERS` a sandbox, each holding at most
:data:`MAX_EVENTS` events not yet fetched (later ones are dropped until
they are); a watcher whose guest watch ended answers what it holds, then the
end's error once (and is gone).  A sandbox's watchers go with it: those of
sandboxes no longer running are removed whenever a watcher is created.
"""

from __future__ import annotations

import posixpath
import secrets
from collections import deque
from typing import Any, Callable, Mapping

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from zope.interface import implementer

from ..errors import AgentError, NotFound
from ..guestport.watch import IWatch, IWatchSink, WatchEvent, WatchRequest
from .connect import Code, ConnectError
from .data_plane import EnvdCall, MessageSink, RpcMethod
from .envd_failures import connect_error_of
from .filesystem import SERVICE, path_of, text_field
from .sandbox import SandboxState
from .sandboxes import Sandboxes

log = Logger(namespace="vmservice.e2b")

#: envd's event types, by the guest's.
EVENT_TYPES = {"create": "EVENT_TYPE_CREATE", "write": "EVENT_TYPE_WRITE", "remove": "EVENT_TYPE_REMOVE",
               "rename": "EVENT_TYPE_RENAME", "chmod": "EVENT_TYPE_CHMOD"}
#: Polling watchers a sandbox may have at once.
MAX_WATCHERS = 64
#: Events a polling watcher holds until they are fetched.
MAX_EVENTS = 10_000


def event_message(event: WatchEvent, root: str) -> dict[str, Any] | None:
    """The ``FilesystemEvent`` of ``event`` under the watched ``root`` (``None`` for an overflow)."""
    kind = EVENT_TYPES.get(event.type)
    if kind is None:
        return None
    return {"name": posixpath.relpath(event.path, root), "type": kind}


@implementer(IWatchSink)
@define
class _Sink:
    """Where a guest watch's events go: ``deliver`` each, ``ended`` fired with the end's error or ``None``."""

    deliver: Callable[[WatchEvent], None]
    ended_with: Deferred[AgentError | None] = field(factory=Deferred)

    def event(self, event: WatchEvent) -> None:
        self.deliver(event)

    def ended(self, error: AgentError | None) -> None:
        if not self.ended_with.called:
            self.ended_with.callback(error)


async def _watching(call: EnvdCall, message: Mapping[str, Any], sink: _Sink) -> tuple[IWatch, str]:
    """Start a guest watch of the message's directory; once it is ready, the watch and the directory."""
    path = path_of(call, message)
    recursive = message.get("recursive", False)
    if not isinstance(recursive, bool):
        raise ConnectError(Code.INVALID_ARGUMENT, "recursive is not a boolean")
    entry = await call.guest.stat(path)
    if entry.type != "directory":
        raise ConnectError(Code.INVALID_ARGUMENT, f"path {path} not a directory")
    watch = call.guest.watch(WatchRequest(paths=(path,), recursive=recursive), sink)
    try:
        await watch.ready
    except BaseException:
        watch.cancel()
        raise
    return watch, path


async def watch_dir(call: EnvdCall, message: dict[str, Any], out: MessageSink) -> None:
    """``WatchDir``: the start, then each event, until the client goes or the guest ends the watch."""
    root: list[str] = []

    def deliver(event: WatchEvent) -> None:
        sent = event_message(event, root[0])
        if sent is not None:
            out.send({"filesystem": sent})

    sink = _Sink(deliver)
    watch, path = await _watching(call, message, sink)
    root.append(path)
    try:
        out.send({"start": {}})
        error = await sink.ended_with
    finally:
        watch.cancel()
    if error is not None:
        raise error


@define
class _Watcher:
    """A polling watcher: its guest watch, the events not yet fetched, its end once it came."""

    sandbox_id: str
    root: str
    watch: IWatch | None = None
    events: deque[dict[str, Any]] = field(factory=deque)
    dropped: int = 0
    ended: bool = False
    error: AgentError | None = None

    def heard(self, event: WatchEvent) -> None:
        sent = event_message(event, self.root)
        if sent is None:
            return
        if len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return
        self.events.append(sent)

    def took(self) -> list[dict[str, Any]]:
        taken = list(self.events)
        self.events.clear()
        if self.dropped:
            log.warn("a watcher of {sandbox} dropped {count} events", sandbox=self.sandbox_id, count=self.dropped)
            self.dropped = 0
        return taken


class Watchers:
    """
    The polling watchers of every sandbox.

    :param sandboxes: the sandboxes (the watchers of one not running are removed).
    """

    def __init__(self, sandboxes: Sandboxes) -> None:
        self._sandboxes = sandboxes
        self._watchers: dict[str, _Watcher] = {}

    def _running(self, sandbox_id: str) -> bool:
        try:
            return self._sandboxes.get(sandbox_id).state is SandboxState.RUNNING
        except NotFound:
            return False

    def prune(self) -> None:
        """Remove the watchers of every sandbox that is not running."""
        for sandbox_id in {watcher.sandbox_id for watcher in self._watchers.values()}:
            if not self._running(sandbox_id):
                self.forget_sandbox(sandbox_id)

    def count(self, sandbox_id: str) -> int:
        """How many watchers ``sandbox_id`` has."""
        return sum(1 for watcher in self._watchers.values() if watcher.sandbox_id == sandbox_id)

    def forget_sandbox(self, sandbox_id: str) -> None:
        """Remove every watcher of ``sandbox_id``."""
        for watcher_id, watcher in list(self._watchers.items()):
            if watcher.sandbox_id == sandbox_id:
                self._remove(watcher_id)

    def _remove(self, watcher_id: str) -> None:
        watcher = self._watchers.pop(watcher_id, None)
        if watcher is not None and watcher.watch is not None and not watcher.ended:
            watcher.watch.cancel()

    def _get(self, call: EnvdCall, message: Mapping[str, Any]) -> tuple[str, _Watcher]:
        watcher_id = text_field(message, "watcherId")
        watcher = self._watchers.get(watcher_id)
        if watcher is None or watcher.sandbox_id != call.sandbox.sandbox_id:
            raise ConnectError(Code.NOT_FOUND, f"watcher with id {watcher_id[:64]} not found")
        return watcher_id, watcher

    async def create(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """``CreateWatcher``: a watcher of the directory, once the guest watches it."""
        sandbox_id = call.sandbox.sandbox_id
        self.prune()
        if self.count(sandbox_id) >= MAX_WATCHERS:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, f"a sandbox may have {MAX_WATCHERS} watchers at once")
        watcher = _Watcher(sandbox_id, "/")
        sink = _Sink(watcher.heard)
        watch, watcher.root = await _watching(call, message, sink)
        watcher.watch = watch
        watcher_id = secrets.token_hex(16)
        self._watchers[watcher_id] = watcher

        def ended(error: AgentError | None) -> None:
            watcher.ended, watcher.error = True, error

        sink.ended_with.addCallback(ended)
        return {"watcherId": watcher_id}

    async def events(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """``GetWatcherEvents``: the events since the last call; a watch that ended then answers its error."""
        watcher_id, watcher = self._get(call, message)
        taken = watcher.took()
        if not taken and watcher.ended:
            self._watchers.pop(watcher_id, None)
            raise connect_error_of(watcher.error) if watcher.error is not None else ConnectError(
                Code.NOT_FOUND, "the watched directory is gone")
        return {"events": taken} if taken else {}

    async def remove(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """``RemoveWatcher``: the watcher stops and is forgotten."""
        watcher_id, _ = self._get(call, message)
        self._remove(watcher_id)
        return {}

    def methods(self) -> dict[str, RpcMethod]:
        """``WatchDir`` and the polling trio, by ``package.Service/Method``."""
        return {f"{SERVICE}/WatchDir": RpcMethod(stream=watch_dir),
                f"{SERVICE}/CreateWatcher": RpcMethod(unary=self.create),
                f"{SERVICE}/GetWatcherEvents": RpcMethod(unary=self.events),
                f"{SERVICE}/RemoveWatcher": RpcMethod(unary=self.remove)}


__all__ = ["EVENT_TYPES", "MAX_EVENTS", "MAX_WATCHERS", "Watchers", "event_message", "watch_dir"]
