# -*- test-case-name: tests.e2b.test_sandboxes -*-
"""
:class:`Sandboxes`: the E2B sandboxes of this daemon, as a Twisted
service over the nodes (:class:`~.host.SandboxHost`): create from a
template (its host group), describe and list, time out (a kill, or a pause
for ``autoPause``), pause, connect (resume) and kill, metrics.  Each
sandbox's life is an automat machine (:mod:`.life`) that says what a
request may do; its record (:mod:`.store`) is written before the answer.

All times come from the clock passed in (its ``seconds()`` are the wall
clock's under the real reactor).  Knows no HTTP.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Callable

from attrs import define, evolve
from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from ..config import E2bConfig
from ..errors import BadRequest, NotFound, ServiceError
from ..nodes.stats import Snapshot
from .host import SandboxHost, is_paused
from .inputs import NewSandbox
from .life import SANDBOX_LIFE, LifeCore, LifeInputs, Verdict, go_ahead
from .sandbox import Sandbox, SandboxState, SandboxView, new_access_token, new_sandbox_id
from .store import SandboxStore

log = Logger(namespace="vmservice.e2b")

#: Seconds after a failed kill until the timer asks again.
KILL_RETRY = 10.0
MiB = 1024 * 1024


@define
class _Entry:
    """One sandbox at run time: its record, its life, its timer, whether the API shows it."""

    sandbox: Sandbox
    life: LifeInputs | None = None
    timer: IDelayedCall | None = None
    shown: bool = False


class Sandboxes(Service):
    """
    The sandboxes.

    :param clock: times the sandboxes' ends (and says what time it is).
    :param host: the nodes under them.
    :param store: their records.
    :param config: the ``e2b:`` section (templates, timeouts).
    :param new_id: makes a new sandbox id.
    """

    name = "e2b-sandboxes"

    def __init__(self, clock: IReactorTime, host: SandboxHost, store: SandboxStore, config: E2bConfig,
                 new_id: Callable[[], str] = new_sandbox_id) -> None:
        self._clock, self._host, self._store, self._config = clock, host, store, config
        self._new_id = new_id
        self._entries: dict[str, _Entry] = {}
        self._stop_listening: Callable[[], None] = lambda: None

    # -- service -------------------------------------------------------------

    def startService(self) -> None:
        super().startService()  # type: ignore[no-untyped-call]  # Twisted's Service is not annotated
        self._stop_listening = self._host.on_deleted(self._deleted)
        self._host.recovered().addCallback(lambda _: self._recover())

    def stopService(self) -> None:
        super().stopService()  # type: ignore[no-untyped-call]  # Twisted's Service is not annotated
        self._stop_listening()
        for entry in self._entries.values():
            if entry.timer is not None and entry.timer.active():
                entry.timer.cancel()
            entry.timer = None

    def _recover(self) -> None:
        """The records read back: each whose node is there starts Running or Paused, the others go."""
        for sandbox in self._store.load():
            if not self.running:
                return
            try:
                record = self._host.node(sandbox.sandbox_id)
            except NotFound:
                self._store.remove(sandbox.sandbox_id)
                continue
            entry = self._enter(sandbox)
            entry.shown = True
            life = self._life(entry)
            life.found_paused() if is_paused(record) else life.created()
            log.info("sandbox {id} found ({state})", id=sandbox.sandbox_id, state=self._state(sandbox).value)

    # -- time ------------------------------------------------------------------

    def now(self) -> datetime:
        """The time now, from the clock."""
        return datetime.fromtimestamp(self._clock.seconds(), timezone.utc)

    def _arm(self, entry: _Entry, delay: float | None = None) -> None:
        if entry.timer is not None and entry.timer.active():
            entry.timer.cancel()
        if delay is None:
            delay = max(0.0, (entry.sandbox.end_at - self.now()).total_seconds())
        entry.timer = self._clock.callLater(delay, self._expired, entry.sandbox.sandbox_id)

    def _disarm(self, entry: _Entry) -> None:
        if entry.timer is not None and entry.timer.active():
            entry.timer.cancel()
        entry.timer = None

    def _expired(self, sandbox_id: str) -> None:
        entry = self._entries.get(sandbox_id)
        if entry is None:
            return
        entry.timer = None
        ending = self.pause(sandbox_id) if entry.sandbox.auto_pause else self.kill(sandbox_id)
        how = "paused" if entry.sandbox.auto_pause else "killed"
        log.info("sandbox {id} timed out: {how}", id=sandbox_id, how=how)
        Deferred.fromCoroutine(ending).addErrback(
            lambda failure: log.failure("sandbox {id}: its end failed", failure, id=sandbox_id))

    # -- entries ---------------------------------------------------------------

    def _enter(self, sandbox: Sandbox) -> _Entry:
        entry = self._entries[sandbox.sandbox_id] = _Entry(sandbox)
        return entry

    def _life(self, entry: _Entry) -> LifeInputs:
        if entry.life is None:
            entry.life = SANDBOX_LIFE(LifeCore(lambda: self._arm(entry), lambda: self._disarm(entry),
                                               lambda: self._arm(entry, KILL_RETRY)))
        return entry.life

    def _forget(self, sandbox_id: str) -> None:
        entry = self._entries.pop(sandbox_id, None)
        if entry is not None:
            self._life(entry).gone()
            self._store.remove(sandbox_id)

    def _deleted(self, hostname: str) -> None:
        if hostname in self._entries:
            log.info("sandbox {id} gone: its node was deleted", id=hostname)
            self._forget(hostname)

    def _entry(self, sandbox_id: str) -> _Entry:
        entry = self._entries.get(sandbox_id)
        if entry is None or not entry.shown:
            raise NotFound(f"sandbox {sandbox_id!r} not found", code="sandbox_not_found")
        return entry

    def _state(self, sandbox: Sandbox) -> SandboxState:
        return self._view(sandbox).state

    def _save(self, entry: _Entry, sandbox: Sandbox) -> None:
        self._store.save(sandbox)
        entry.sandbox = sandbox

    def _view(self, sandbox: Sandbox) -> SandboxView:
        record = self._host.node(sandbox.sandbox_id)
        return SandboxView(sandbox, SandboxState.PAUSED if is_paused(record) else SandboxState.RUNNING,
                           record.cpus, record.ram_bytes // MiB, self._host.disk_bytes(sandbox.group) // MiB)

    # -- queries ---------------------------------------------------------------

    def get(self, sandbox_id: str) -> SandboxView:
        """Sandbox ``sandbox_id``; :class:`NotFound` when there is none."""
        return self._view(self._entry(sandbox_id).sandbox)

    def all(self) -> list[SandboxView]:
        """Every sandbox the API shows (made, not gone)."""
        views = []
        for entry in list(self._entries.values()):
            if entry.shown:
                try:
                    views.append(self._view(entry.sandbox))
                except NotFound:
                    continue
        return views

    async def metrics(self, sandbox_id: str) -> Snapshot | None:
        """A sample of sandbox ``sandbox_id``'s guest; ``None`` while it is paused or does not answer."""
        entry = self._entry(sandbox_id)
        if self._state(entry.sandbox) is SandboxState.PAUSED:
            return None
        return await self._host.snapshot(sandbox_id)

    # -- changes ---------------------------------------------------------------

    def _fresh_id(self) -> str:
        for _ in range(8):
            sandbox_id = self._new_id()
            if sandbox_id not in self._entries:
                try:
                    self._host.node(sandbox_id)
                except NotFound:
                    return sandbox_id
        raise ServiceError("no free sandbox id was drawn")

    async def create(self, new: NewSandbox) -> SandboxView:
        """
        A new sandbox of ``new.template_id``'s host group, its agent answering.

        :raise BadRequest: no such template.
        """
        group = self._config.group_of(new.template_id)
        if group is None:
            raise BadRequest(f"template {new.template_id!r} not found")
        timeout = self._config.default_timeout_seconds if new.timeout is None else new.timeout
        sandbox = Sandbox(self._fresh_id(), new.template_id, group, self.now(), self.now(), new.auto_pause,
                          new.metadata, new.env_vars, new_access_token() if new.secure else "")
        entry = self._enter(sandbox)
        life = self._life(entry)
        try:
            self._store.save(sandbox)
            await self._host.create(group, sandbox.sandbox_id)
        except BaseException:
            self._forget(sandbox.sandbox_id)
            raise
        started = self.now()  # its timeout runs from here: a cold boot does not eat it
        self._save(entry, evolve(sandbox, started_at=started, end_at=started + timedelta(seconds=timeout)))
        entry.shown = True
        life.created()
        log.info("sandbox {id} created from template {template}", id=sandbox.sandbox_id, template=new.template_id)
        return self._view(entry.sandbox)

    def set_timeout(self, sandbox_id: str, timeout: int) -> None:
        """Sandbox ``sandbox_id`` ends ``timeout`` seconds from now (0: now)."""
        entry = self._entry(sandbox_id)
        self._save(entry, entry.sandbox.ending(self.now() + timedelta(seconds=timeout)))
        if entry.timer is not None:  # running: its timer follows
            self._arm(entry)

    async def connect(self, sandbox_id: str, timeout: int | None) -> tuple[SandboxView, bool]:
        """
        Sandbox ``sandbox_id`` running, ending no sooner than ``timeout``
        seconds from now; whether it was resumed to be.

        :raise Conflict: another operation (a pause, a resume) is under way.
        """
        entry = self._entry(sandbox_id)
        seconds = self._config.default_timeout_seconds if timeout is None else timeout
        verdict = self._life(entry).resume()
        go_ahead(verdict, sandbox_id)
        end_at = max(entry.sandbox.end_at, self.now() + timedelta(seconds=seconds))
        if verdict is Verdict.ALREADY:
            self._save(entry, entry.sandbox.ending(end_at))
            self._arm(entry)
            return self._view(entry.sandbox), False
        try:
            await self._host.restore(sandbox_id)
        except BaseException:
            self._life(entry).resume_failed()
            raise
        self._save(entry, entry.sandbox.ending(max(end_at, self.now())))
        self._life(entry).resumed()
        log.info("sandbox {id} resumed", id=sandbox_id)
        return self._view(entry.sandbox), True

    async def pause(self, sandbox_id: str) -> None:
        """
        Pause sandbox ``sandbox_id`` (its node suspended).

        :raise Conflict: it is paused already (``already_paused``), or another operation is under way.
        """
        entry = self._entry(sandbox_id)
        go_ahead(self._life(entry).pause(), sandbox_id, already="already_paused")
        try:
            await self._host.suspend(sandbox_id)
        except BaseException:
            self._life(entry).pause_failed()
            raise
        self._life(entry).paused()
        log.info("sandbox {id} paused", id=sandbox_id)

    async def kill(self, sandbox_id: str) -> None:
        """Kill sandbox ``sandbox_id``: its node deleted, its record removed."""
        entry = self._entry(sandbox_id)
        go_ahead(self._life(entry).kill(), sandbox_id)
        try:
            await self._host.delete(entry.sandbox.group, sandbox_id)
        except NotFound:
            pass
        except BaseException:
            self._life(entry).kill_failed()
            raise
        self._forget(sandbox_id)
        log.info("sandbox {id} killed", id=sandbox_id)


__all__ = ["KILL_RETRY", "Sandboxes"]
