# -*- test-case-name: tests.e2b.test_watching -*-
"""
envd's directory watching over a sandbox's guest watch
(:meth:`~vmservice.guestport.guest.IGuest.watch`): the ``WatchDir`` stream
and the polling trio ``CreateWatcher``, ``GetWatcherEvents`` (the events so
far, then forgotten) and ``RemoveWatcher``, which the sync SDK uses.

``WatchDir`` answers ``{"start": {}}`` once the guest watches the
directory, then one ``{"filesystem": {"name", "type"}}`` per event:
``name`` relative to the watched directory, ``type`` one of
:data:`~.watch_events.EVENT_TYPES` (as fsnotify's: a file written into the
directory is a create, then its writes; an upload's temporary file is
folded into its name, :mod:`.watch_events`).  The guest's ``overflow`` (events it dropped) is
not an envd event and is left out.

The polling watchers are the daemon's: :class:`Watchers` keeps each
sandbox's, at most :data:`MAX_WATCHERS` a sandbox, each an automat machine
(:mod:`.watcher_state`) holding at most
:data:`~.watcher_state.MAX_EVENTS` events not yet fetched; a watcher whose
guest watch ended answers what it holds, then the end's error once (and is
gone).  A sandbox's watchers go with it: with its node, and those of
sandboxes no longer running (paused) whenever a watcher is created.
"""

from __future__ import annotations

import secrets
from typing import Any, Callable, Mapping

from attrs import define, field
from twisted.internet.defer import Deferred
from zope.interface import implementer

from ..errors import AgentError, NotFound
from ..guestport.watch import IWatch, IWatchSink, WatchEvent, WatchRequest
from .connect import Code, ConnectError
from .data_plane import EnvdCall, MessageSink, RpcMethod
from .filesystem import SERVICE, path_of, text_field
from .watch_events import EventFolding, event_message
from .watcher_state import WATCHER_MACHINE, WatcherCore, WatcherInputs
from .host import SandboxHost
from .sandbox import SandboxState
from .sandboxes import Sandboxes

#: Polling watchers a sandbox may have at once.
MAX_WATCHERS = 64


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
    folding = EventFolding()

    def deliver(event: WatchEvent) -> None:
        shown = folding.fold(event)
        sent = event_message(shown, root[0]) if shown is not None else None
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


class Watchers:
    """
    The polling watchers of every sandbox.

    :param sandboxes: the sandboxes (the watchers of one not running are removed).
    :param host: the nodes under them (a node deleted takes its sandbox's watchers at once).
    """

    def __init__(self, sandboxes: Sandboxes, host: SandboxHost) -> None:
        self._sandboxes = sandboxes
        self._watchers: dict[str, tuple[WatcherCore, WatcherInputs]] = {}
        host.on_deleted(self.forget_sandbox)

    def _running(self, sandbox_id: str) -> bool:
        try:
            return self._sandboxes.get(sandbox_id).state is SandboxState.RUNNING
        except NotFound:
            return False

    def prune(self) -> None:
        """Remove the watchers of every sandbox that is not running."""
        for sandbox_id in {core.sandbox_id for core, _ in self._watchers.values()}:
            if not self._running(sandbox_id):
                self.forget_sandbox(sandbox_id)

    def count(self, sandbox_id: str) -> int:
        """How many watchers ``sandbox_id`` has."""
        return sum(1 for core, _ in self._watchers.values() if core.sandbox_id == sandbox_id)

    def forget_sandbox(self, sandbox_id: str) -> None:
        """Remove every watcher of ``sandbox_id``."""
        for watcher_id, (core, _) in list(self._watchers.items()):
            if core.sandbox_id == sandbox_id:
                self._remove(watcher_id)

    def _remove(self, watcher_id: str) -> None:
        found = self._watchers.pop(watcher_id, None)
        if found is not None:
            found[1].remove()

    def _get(self, call: EnvdCall, message: Mapping[str, Any]) -> tuple[str, WatcherInputs]:
        watcher_id = text_field(message, "watcherId")
        found = self._watchers.get(watcher_id)
        if found is None or found[0].sandbox_id != call.sandbox.sandbox_id:
            raise ConnectError(Code.NOT_FOUND, f"watcher with id {watcher_id[:64]} not found")
        return watcher_id, found[1]

    async def create(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """``CreateWatcher``: a watcher of the directory, once the guest watches it."""
        sandbox_id = call.sandbox.sandbox_id
        self.prune()
        if self.count(sandbox_id) >= MAX_WATCHERS:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, f"a sandbox may have {MAX_WATCHERS} watchers at once")
        core = WatcherCore(sandbox_id, "/")
        watcher = WATCHER_MACHINE(core)
        sink = _Sink(watcher.heard)
        core.watch, core.root = await _watching(call, message, sink)
        watcher_id = secrets.token_hex(16)
        self._watchers[watcher_id] = (core, watcher)
        sink.ended_with.addCallback(watcher.ended)
        return {"watcherId": watcher_id}

    async def events(self, call: EnvdCall, message: dict[str, Any]) -> Mapping[str, Any]:
        """``GetWatcherEvents``: the events since the last call; a watch that ended then answers its error."""
        watcher_id, watcher = self._get(call, message)
        try:
            taken = watcher.take()
        except ConnectError:
            self._watchers.pop(watcher_id, None)
            raise
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


__all__ = ["MAX_WATCHERS", "Watchers", "watch_dir"]
