# -*- test-case-name: tests.nodes.warm.test_templates -*-
"""
The templates of this daemon: one pre-booted, frozen guest per
:class:`TemplateKey`, which warm groups' nodes are cloned from.

A template is a directory ``<state_dir>/templates/<digest>.<serial>/`` holding
its frozen disk (``disk.qcow2``, read-only, the backing file of every clone's
disk) and its device state (``dev.bin``), and a RAM file in a tmpfs directory
of this daemon alone (``<templates_tmpfs_dir>/vmservice-<state dir digest>/``,
made or verified by :func:`~vmservice.private_files.private_directory`; the
RAM file made there, 0600, before QEMU maps it): templates are never shared
between daemons, so tenants never share memory pages.

:class:`TemplateStore` builds each key once (concurrent asks share one build),
keeps the RAM files within the tmpfs budget (the least recently used
templates go first), replaces a template whose image build or QEMU changed,
and deletes a frozen disk only once no node record names it.  The build
itself (boot, warm up, save) is the caller's (:mod:`.template_build`).  Each
key has one record: its facts and its state, an automat machine
(:mod:`.template_state`: Absent, Building, Ready, Failed).
"""

from __future__ import annotations

import os
import shutil
from typing import Callable, Iterable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ...errors import no_room
from ...observer import OneShotObserver
from ...private_files import NotPrivate, create_private, private_directory
from ..paths import discard, listing
from .spare import SPARE_PREFIX, Spare
from .template_files import Template, ram_directory
from .template_key import TemplateKey
from .template_records import RETRY_AFTER, Build, BuildUnderWay, TemplateUnavailable, run_build
from .template_state import TemplateRecord

log = Logger()

class TemplateStore:
    """
    The templates of one daemon: one :class:`TemplateRecord` per key asked about.

    :param clock: times the memory of failed builds.
    :param state_dir: the daemon's state directory (templates go in ``templates/``).
    :param tmpfs_dir: the tmpfs under which the daemon's RAM files go.
    :param budget: bytes the RAM files may take at once.
    :param on_build: called with ``ok`` or ``failed`` after each build.
    :ivar builds: how many builds were started.
    :ivar short_of_room: by key, the retry of a spare refused for lack of memory (``Cloning.room_freed``).
    """

    def __init__(
        self,
        clock: IReactorTime,
        state_dir: str,
        tmpfs_dir: str,
        budget: int,
        on_build: Callable[[str], None] = lambda result: None,
    ) -> None:
        self._clock = clock
        self.directory = os.path.join(state_dir, "templates")
        self.ram_directory = ram_directory(state_dir, tmpfs_dir)
        self._budget = budget
        self._on_build = on_build
        #: By key; the ready ones in the order they became ready (the LRU's ties go to the older).
        self._records: dict[TemplateKey, TemplateRecord] = {}
        self.short_of_room: dict[TemplateKey, Callable[[], None]] = {}
        self.builds = 0

    def _record(self, key: TemplateKey) -> TemplateRecord:
        record = self._records.get(key)
        if record is None:
            record = self._records[key] = TemplateRecord.new(key)
        return record

    async def get(self, key: TemplateKey, kernel: str, initrd: str, build: Build) -> Template:
        """
        The template of ``key``, built with ``build`` unless it is there or
        being built (then this waits for that build).

        :raise TemplateUnavailable: it cannot be had now; the reason says why.
        """
        record = self._record(key)
        record.core.used = self._clock.seconds()
        template = record.state.template()
        if template is not None:
            gone = template.missing()
            if gone is None:
                return template
            self.discard(key)
            raise TemplateUnavailable("missing", f"the template was removed under the daemon ({gone})")
        waiting = record.state.join(self._clock.seconds())
        if waiting is None:
            waiting = self._start(record, kernel, initrd, build).when_fired()
        return await waiting

    def _start(self, record: TemplateRecord, kernel: str, initrd: str, build: Build) -> OneShotObserver[Template]:
        key = record.core.key
        for old in [k for k, other in self._records.items()
                    if key.supersedes(k) and other.state.template() is not None]:
            log.info("template {digest} is replaced (its image build or QEMU changed)", digest=old.digest())
            self.discard(old)
        self._make_room(key)
        self.builds += 1
        template = self._files(key, kernel, initrd)
        building: OneShotObserver[Template] = OneShotObserver()

        def done(result: None | Failure) -> None:
            if isinstance(result, Failure):
                self._failed(record, building, result)
                return
            try:
                os.chmod(template.disk, 0o400)
                os.chmod(template.device_state, 0o400)
            except OSError as error:  # a build that wrote no files failed, whatever it said
                self._failed(record, building, Failure(error))
                return
            record.state.built(template)
            self._records[key] = self._records.pop(key)
            self._on_build("ok")
            log.info("template {digest} is ready", digest=key.digest())
            building.fire(template)

        log.info("building template {digest} ({key})", digest=key.digest(), key=key)
        run = Deferred.fromCoroutine(run_build(build, template))
        record.state.started(BuildUnderWay(template, building, run))
        run.addBoth(done)
        return building

    def _files(self, key: TemplateKey, kernel: str, initrd: str) -> Template:
        """A new template's (empty) files, under a name no earlier build of ``key`` had."""
        # Never an earlier build's name (whose frozen disk nodes may still read from), short for socket paths.
        name = f"{key.digest()}.{os.urandom(3).hex()}"
        while any(os.path.lexists(os.path.join(d, name)) for d in (self.directory, self.ram_directory)):
            name = f"{key.digest()}.{os.urandom(3).hex()}"
        directory = os.path.join(self.directory, name)
        template = Template(
            key=key,
            directory=directory,
            disk=os.path.join(directory, "disk.qcow2"),
            device_state=os.path.join(directory, "dev.bin"),
            ram_file=os.path.join(self.ram_directory, name),
            kernel=kernel,
            initrd=initrd,
        )
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            private_directory(self.ram_directory)
            os.close(create_private(template.ram_file))  # 0600, not through a link; QEMU sizes and maps it
        except (OSError, NotPrivate) as error:
            raise TemplateUnavailable("build_failed", f"the template's files cannot be made: {error}") from None
        return template

    def _failed(self, record: TemplateRecord, building: OneShotObserver[Template], result: Failure) -> None:
        """The build of ``record``'s key failed: remembered (unless for lack of room), its asks told."""
        key = record.core.key
        reason = str(result.value) or type(result.value).__name__
        log.warn("building template {digest} failed: {reason}", digest=key.digest(), reason=reason)
        if result.value is None or not no_room(result.value):  # no room: tried again at the next create
            record.state.failed(self._clock.seconds(), reason)
        else:
            record.state.no_room()
        self._on_build("failed")
        building.error(Failure(TemplateUnavailable("build_failed", f"the template's build failed: {reason}")))

    def _ram_in_use(self) -> int:
        return sum(record.state.ram() for record in self._records.values())

    def _make_room(self, key: TemplateKey) -> None:
        """Drop the least recently used templates until ``key``'s RAM fits the budget."""
        if key.ram_bytes > self._budget:
            raise TemplateUnavailable(
                "budget", f"the template's {key.ram_bytes} bytes of RAM exceed templates_tmpfs_budget ({self._budget})"
            )
        ready = [record.core for record in self._records.values() if record.state.template() is not None]
        for old in sorted(ready, key=lambda core: core.used):
            if self._ram_in_use() + key.ram_bytes <= self._budget:
                break
            log.info("template {digest} is dropped to stay within the tmpfs budget", digest=old.key.digest())
            self.discard(old.key)
        if self._ram_in_use() + key.ram_bytes > self._budget:
            raise TemplateUnavailable(
                "budget", f"templates being built fill templates_tmpfs_budget ({self._budget} bytes)"
            )

    def discard(self, key: TemplateKey, only: Template | None = None) -> None:
        """
        Forget the template of ``key`` (broken, replaced or not needed): its
        RAM file and device state go now, its frozen disk once no node names
        it (:meth:`collect`).

        :param only: forget it only if it is this one (not one built since).
        """
        record = self._records.get(key)
        template = record.state.template() if record is not None else None
        if record is None or template is None or (only is not None and template != only):
            return
        record.state.drop()

    def add_spare(self, template: Template) -> Spare | None:
        """
        A new spare VM (not started) for ``template``, kept next to it (with
        a tap of its own when the template has a network); ``None`` when the
        template is not the ready one of its key, its pool is full (as many
        spares starting or ready as a group wants), one is being started (one
        at a time), or a clone of it is being made.
        """
        record = self._records.get(template.key)
        return record.state.add_spare(template) if record is not None else None

    def take_spare(self, template: Template) -> Spare | None:
        """A ready spare of ``template``, now the caller's (no other caller gets it), or ``None``."""
        record = self._records.get(template.key)
        return record.state.take_spare(template) if record is not None else None

    def clone_began(self, key: TemplateKey) -> None:
        """A clone of ``key``'s template is being made (no spare is started meanwhile)."""
        self._record(key).core.cloning += 1

    def clone_ended(self, key: TemplateKey) -> bool:
        """A clone of ``key``'s template is made or failed: whether no other one is being made."""
        core = self._record(key).core
        core.cloning = (core.cloning or 1) - 1
        return not core.cloning

    def wants_spare(self, key: TemplateKey, count: int) -> int:
        """
        How many spares ``key``'s template keeps: the most any group that
        uses it asked for (``count``: what the caller's group asks for).
        """
        core = self._record(key).core
        wanted = max(core.wanted, count)
        if wanted:
            core.wanted = wanted
        return wanted

    def spare_ram(self) -> list[int]:
        """The guest RAM of each spare that holds memory (starting or ready), for admission."""
        return [ram for record in self._records.values() for ram in record.state.spare_ram()]

    def collect(self, referenced: set[str], spares: Iterable[str] = ()) -> None:
        """
        Delete what no template in use and no node needs: template
        directories whose frozen disk no record in ``referenced`` names (the
        frozen disks of the records' disks), spare directories in the others
        that are neither a spare of this run nor in ``spares`` (the
        directories of the spares nodes were handed), and RAM files of
        templates this run does not know (an earlier run's).
        """
        held = [record.state.files() for record in self._records.values()]
        live = {files.directory for files in held if files.directory}
        live |= {os.path.dirname(path) for path in referenced}
        kept = set(spares) | {spare for files in held for spare in files.spares}
        building = {files.building for files in held if files.building}
        for name in listing(self.directory):
            path = os.path.join(self.directory, name)
            if path not in live and name not in building:
                log.info("removing unused template files {path}", path=path)
                shutil.rmtree(path, ignore_errors=True)
            elif path in live:
                for inner in listing(path):
                    spare = os.path.join(path, inner)
                    if inner.startswith(SPARE_PREFIX) and spare not in kept:
                        log.info("removing unused spare VM files {path}", path=spare)
                        shutil.rmtree(spare, ignore_errors=True)
        known = {files.ram_name for files in held if files.ram_name} | building
        for name in listing(self.ram_directory):
            if name not in known:
                discard(os.path.join(self.ram_directory, name))

    def close(self) -> None:
        """
        The daemon stops: builds under way are cancelled (their VMs killed),
        spare VMs killed, the RAM files go (the frozen disks stay for the nodes on disk).
        """
        for run in [record.state.stopping() for record in list(self._records.values())]:
            if run is not None:
                run.cancel()
        for key in list(self._records):
            self.discard(key)
        try:
            os.rmdir(self.ram_directory)
        except OSError:
            pass


__all__ = ["Build", "RETRY_AFTER", "TemplateStore", "TemplateUnavailable"]
