# -*- test-case-name: tests.nodes.warm.test_template_state -*-
"""
One template key's state in :class:`~vmservice.nodes.warm.templates.TemplateStore`,
as one automat machine (diagram: ``docs/state-machines/template.dot``).

Theory of operation
-------------------

The store keeps one :class:`TemplateRecord` per :class:`TemplateKey` it was
asked about: the key's :class:`TemplateCore` (when it was last asked for,
how many clones of it are being made, how many spares its groups want: facts
of the key, whatever its template is) and its :class:`TemplateState`.

- **Absent**: no template and no build: never asked for, dropped (broken,
  missing, least recently used, the daemon stops), replaced by a newer image
  build or QEMU, or its build failed for lack of room (tried again at the
  next ask).  An ask :meth:`starts <TemplateState.started>` a build.
- **Building** (the build's template, the observer its asks share, its
  run): every ask :meth:`joins <TemplateState.join>` the one build; its RAM
  counts against the tmpfs budget, its files are kept from the collection.
  It ends :meth:`built <TemplateState.built>`, :meth:`failed
  <TemplateState.failed>` or failed for lack of room (:meth:`no_room
  <TemplateState.no_room>`); the files of a build that failed go.
- **Ready** (the template and its pool of spare VMs): asks get the
  template; spares are added to and taken from its pool.  :meth:`drop
  <TemplateState.drop>` kills the spares and removes the RAM file, the
  device state and the empty overlay (the frozen disk stays for the nodes
  that name it, until :meth:`~vmservice.nodes.warm.templates.TemplateStore.collect`).
- **Failed** (when, why): asks within :data:`RETRY_AFTER` of the failure are
  refused with its reason (the node boots cold); a later ask starts a build.

The inputs that the store never sends in a state (a second build, a drop of
no template) are not transitions there: the machine refuses them
(``automat.NoTransition``).  The store asks no state: it sends the input, and
each state answers it in its own way.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Protocol

from attrs import define, field, frozen
from automat import TypeMachine, TypeMachineBuilder
from automat._typed import TypedDataState, TypedState  # the types of a builder's states, not exported
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from ...observer import OneShotObserver
from .spare import Spare
from .template_files import Template
from .template_key import TemplateKey
from .template_records import (
    RETRY_AFTER, BuildFailure, BuildUnderWay, Built, Held, TemplateUnavailable, delete_files, new_spare,
)

log = Logger()

class TemplateState(Protocol):
    """The inputs of a template key's state."""

    def template(self) -> Template | None:
        """The ready template, or ``None``."""

    def join(self, now: float) -> Deferred[Template] | None:
        """
        An ask finds no ready template: the build under way to wait for, or
        ``None`` when one is to be started.

        :raise TemplateUnavailable: (``build_failed``) a build failed less than :data:`RETRY_AFTER` ago.
        """

    def started(self, build: BuildUnderWay) -> None:
        """A build starts."""

    def built(self, template: Template) -> None:
        """The build made ``template`` (its files made read-only)."""

    def failed(self, at: float, reason: str) -> None:
        """The build failed at ``at``, for ``reason``: its files go, and the failure is remembered."""

    def no_room(self) -> None:
        """The build failed for lack of room: its files go, and the next ask builds again."""

    def stopping(self) -> Deferred[None] | None:
        """The daemon stops: the run of the build under way (the caller cancels it), or ``None``."""

    def drop(self) -> None:
        """The ready template goes: its spares are killed, its files but the frozen disk removed."""

    def ram(self) -> int:
        """The bytes of the tmpfs it holds (a build's or a ready template's RAM file)."""

    def files(self) -> Held:
        """What of its files the collection keeps."""

    def add_spare(self, template: Template) -> Spare | None:
        """A new spare VM (not started) of ``template`` in the pool, or ``None`` (see the store's)."""

    def take_spare(self, template: Template) -> Spare | None:
        """A ready spare of ``template``, now the caller's, or ``None``."""

    def spare_ram(self) -> tuple[int, ...]:
        """The guest RAM of each spare that holds memory."""


@define
class TemplateCore:
    """
    What a key's states share: facts of the key, whatever its template.

    :ivar key: the template key.
    :ivar used: when it was last asked for (the least recently used ready template goes first).
    :ivar cloning: how many clones of it are being made.
    :ivar wanted: how many spares it keeps (the most any group of it asked for).
    """

    key: TemplateKey
    used: float = 0.0
    cloning: int = 0
    wanted: int = 0


_State = TypedState[TemplateState, TemplateCore]
_BuildState = TypedDataState[TemplateState, TemplateCore, BuildUnderWay, [BuildUnderWay]]
_ReadyState = TypedDataState[TemplateState, TemplateCore, Built, [Template]]
_FailedState = TypedDataState[TemplateState, TemplateCore, BuildFailure, [float, str]]


def _build() -> TypeMachine[TemplateState, TemplateCore]:
    builder = TypeMachineBuilder(TemplateState, TemplateCore)
    absent = builder.state("Absent")
    building = builder.state("Building", lambda state, core, build: build)
    ready = builder.state("Ready", lambda state, core, template: Built(template))
    failed = builder.state("Failed", lambda state, core, at, reason: BuildFailure(at, reason))

    absent.upon(TemplateState.started).to(building).returns(None)
    failed.upon(TemplateState.started, nodata=True).to(building).returns(None)
    building.upon(TemplateState.built, nodata=True).to(ready).returns(None)

    @building.upon(TemplateState.failed).to(failed)
    def build_failed(state: TemplateState, core: TemplateCore, build: BuildUnderWay, at: float, reason: str) -> None:
        delete_files(build.template, keep_disk=False)

    @building.upon(TemplateState.no_room).to(absent)
    def build_found_no_room(state: TemplateState, core: TemplateCore, build: BuildUnderWay) -> None:
        delete_files(build.template, keep_disk=False)

    @ready.upon(TemplateState.drop).to(absent)
    def drop(state: TemplateState, core: TemplateCore, built: Built) -> None:
        for spare in built.spares:
            spare.kill()
        delete_files(built.template, keep_disk=True)

    _answers(absent, building, ready, failed)
    _spares(absent, building, ready, failed)
    return builder.build()


def _same(states: tuple[Any, ...], symbol: Callable[..., object], answer: object) -> None:
    """Each of ``states`` answers input ``symbol`` with ``answer`` and stays as it is."""
    for state in states:
        state.upon(symbol).loop().returns(answer)


def _answers(absent: _State, building: _BuildState, ready: _ReadyState, failed: _FailedState) -> None:
    """The inputs that leave each state as it is: its template, asks, RAM and files."""
    _same((absent, building, failed), TemplateState.template, None)

    @ready.upon(TemplateState.template).loop()
    def ready_template(state: TemplateState, core: TemplateCore, built: Built) -> Template:
        return built.template

    absent.upon(TemplateState.join).loop().returns(None)

    @building.upon(TemplateState.join).loop()
    def join_build(state: TemplateState, core: TemplateCore, build: BuildUnderWay, now: float) -> Deferred[Template]:
        return build.observer.when_fired()

    @failed.upon(TemplateState.join).loop()
    def join_failed(state: TemplateState, core: TemplateCore, failure: BuildFailure, now: float) -> None:
        if now - failure.at < RETRY_AFTER:
            raise TemplateUnavailable("build_failed", f"the template's build failed: {failure.reason}")

    @building.upon(TemplateState.stopping).loop()
    def stop_build(state: TemplateState, core: TemplateCore, build: BuildUnderWay) -> Deferred[None]:
        return build.run

    _same((absent, ready, failed), TemplateState.stopping, None)
    _same((absent, failed), TemplateState.ram, 0)
    _same((absent, failed), TemplateState.files, Held())

    @building.upon(TemplateState.ram, nodata=True).loop()
    def build_ram(state: TemplateState, core: TemplateCore) -> int:
        return core.key.ram_bytes

    @ready.upon(TemplateState.ram, nodata=True).loop()
    def ready_ram(state: TemplateState, core: TemplateCore) -> int:
        return core.key.ram_bytes

    @building.upon(TemplateState.files).loop()
    def build_files(state: TemplateState, core: TemplateCore, build: BuildUnderWay) -> Held:
        return Held(building=os.path.basename(build.template.directory))

    @ready.upon(TemplateState.files).loop()
    def ready_files(state: TemplateState, core: TemplateCore, built: Built) -> Held:
        return Held(built.template.directory, os.path.basename(built.template.ram_file),
                    tuple(spare.directory for spare in built.spares))


def _spares(absent: _State, building: _BuildState, ready: _ReadyState, failed: _FailedState) -> None:
    """The pool of spare VMs: a ready template's alone."""
    _same((absent, building, failed), TemplateState.add_spare, None)
    _same((absent, building, failed), TemplateState.take_spare, None)
    _same((absent, building, failed), TemplateState.spare_ram, ())

    @ready.upon(TemplateState.add_spare).loop()
    def add_spare(state: TemplateState, core: TemplateCore, built: Built, template: Template) -> Spare | None:
        pool = built.pool()
        if (built.template != template or len(pool) >= core.wanted
                or any(spare.phase.starting() for spare in pool) or core.cloning):
            return None
        spare = new_spare(template)
        if spare is not None:
            built.spares.append(spare)
        return spare

    @ready.upon(TemplateState.take_spare).loop()
    def take_spare(state: TemplateState, core: TemplateCore, built: Built, template: Template) -> Spare | None:
        pool = built.pool()
        for spare in pool:
            if spare.template == template and spare.phase.take():
                pool.remove(spare)
                return spare
        return None

    @ready.upon(TemplateState.spare_ram).loop()
    def spare_ram(state: TemplateState, core: TemplateCore, built: Built) -> tuple[int, ...]:
        return tuple(spare.template.key.ram_bytes for spare in built.spares if spare.phase.holds())


#: The machine; calling it with a core gives a key's state (Absent).
TEMPLATE_STATE = _build()


@frozen
class TemplateRecord:
    """
    One key's record in the store.

    :ivar core: the key's facts.
    :ivar state: its state machine.
    """

    core: TemplateCore
    state: TemplateState

    @classmethod
    def new(cls, key: TemplateKey) -> TemplateRecord:
        """The record of a key not asked for before: Absent."""
        core = TemplateCore(key)
        return cls(core, TEMPLATE_STATE(core))


__all__ = ["TEMPLATE_STATE", "TemplateCore", "TemplateRecord", "TemplateState"]
