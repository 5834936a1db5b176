# -*- test-case-name: tests.nodes.test_templates -*-
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
itself (boot, warm up, save) is the caller's (:mod:`.template_build`).
"""

from __future__ import annotations

import os
import shutil
from typing import Awaitable, Callable, Iterable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import Internal, no_room
from ..observer import OneShotObserver
from ..private_files import NotPrivate, create_private, private_directory
from .paths import daemon_tag, discard
from .spare import SPARE_PREFIX, SPARE_TAP_PREFIX, Spare
from .template_files import Template
from .template_key import TemplateKey

log = Logger()

#: Seconds a failed build of a key is remembered: creates meanwhile boot cold at once instead of trying again.
RETRY_AFTER = 60.0


class TemplateUnavailable(Exception):
    """No template can be used: the node boots cold.

    :ivar kind: a short word for the metric (``build_failed``, ``budget``,
        ``missing``, ``load_failed``, ``network``).
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


#: Builds a template into its (empty, existing) files; fails with why not.
Build = Callable[[Template], Awaitable[None]]


def ram_directory(state_dir: str, tmpfs_dir: str) -> str:
    """The directory of this daemon's templates' RAM files (in a tmpfs others may share)."""
    return os.path.join(tmpfs_dir, f"vmservice-{daemon_tag(state_dir)}")


class TemplateStore:
    """
    The templates of one daemon.

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
        self._ready: dict[TemplateKey, Template] = {}
        self._building: dict[TemplateKey, OneShotObserver[Template]] = {}
        #: The names of the directories (and RAM files) of the builds under way.
        self._building_names: set[str] = set()
        self._failed: dict[TemplateKey, tuple[float, str]] = {}
        self._used: dict[TemplateKey, float] = {}
        self._runs: dict[TemplateKey, Deferred[None]] = {}
        self._spares: dict[TemplateKey, list[Spare]] = {}
        self._cloning: dict[TemplateKey, int] = {}
        self._wanted: dict[TemplateKey, int] = {}
        self.short_of_room: dict[TemplateKey, Callable[[], None]] = {}
        self.builds = 0

    async def get(self, key: TemplateKey, kernel: str, initrd: str, build: Build) -> Template:
        """
        The template of ``key``, built with ``build`` unless it is there or
        being built (then this waits for that build).

        :raise TemplateUnavailable: it cannot be had now; the reason says why.
        """
        self._used[key] = self._clock.seconds()
        template = self._ready.get(key)
        if template is not None:
            gone = template.missing()
            if gone is None:
                return template
            self.discard(key)
            raise TemplateUnavailable("missing", f"the template was removed under the daemon ({gone})")
        building = self._building.get(key)
        if building is None:
            failed = self._failed.get(key)
            if failed is not None and self._clock.seconds() - failed[0] < RETRY_AFTER:
                raise TemplateUnavailable("build_failed", f"the template's build failed: {failed[1]}")
            building = self._start(key, kernel, initrd, build)
        return await building.when_fired()

    def _start(self, key: TemplateKey, kernel: str, initrd: str, build: Build) -> OneShotObserver[Template]:
        for old in [k for k in self._ready if key.supersedes(k)]:
            log.info("template {digest} is replaced (its image build or QEMU changed)", digest=old.digest())
            self.discard(old)
        self._make_room(key)
        self.builds += 1
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
        building: OneShotObserver[Template] = OneShotObserver()
        self._building[key] = building
        self._building_names.add(name)

        def done(result: None | Failure) -> None:
            del self._building[key]
            self._building_names.discard(name)
            self._runs.pop(key, None)
            if isinstance(result, Failure):
                reason = str(result.value) or type(result.value).__name__
                log.warn("building template {digest} failed: {reason}", digest=key.digest(), reason=reason)
                if result.value is None or not no_room(result.value):  # no room: tried again at the next create
                    self._failed[key] = (self._clock.seconds(), reason)
                self._on_build("failed")
                self._delete(template, keep_disk=False)
                building.error(Failure(TemplateUnavailable("build_failed", f"the template's build failed: {reason}")))
                return
            os.chmod(template.disk, 0o400)
            os.chmod(template.device_state, 0o400)
            self._failed.pop(key, None)
            self._ready[key] = template
            self._on_build("ok")
            log.info("template {digest} is ready", digest=key.digest())
            building.fire(template)

        log.info("building template {digest} ({key})", digest=key.digest(), key=key)
        run = Deferred.fromCoroutine(_run(build, template))
        self._runs[key] = run
        run.addBoth(done)
        return building

    def _ram_in_use(self) -> int:
        building = sum(key.ram_bytes for key in self._building)
        return building + sum(key.ram_bytes for key in self._ready)

    def _make_room(self, key: TemplateKey) -> None:
        """Drop the least recently used templates until ``key``'s RAM fits the budget."""
        if key.ram_bytes > self._budget:
            raise TemplateUnavailable(
                "budget", f"the template's {key.ram_bytes} bytes of RAM exceed templates_tmpfs_budget ({self._budget})"
            )
        for old in sorted(self._ready, key=lambda k: self._used.get(k, 0.0)):
            if self._ram_in_use() + key.ram_bytes <= self._budget:
                break
            log.info("template {digest} is dropped to stay within the tmpfs budget", digest=old.digest())
            self.discard(old)
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
        template = self._ready.get(key)
        if template is None or (only is not None and template != only):
            return
        del self._ready[key]
        self._kill_spares(key)
        self._delete(template, keep_disk=True)

    def add_spare(self, template: Template) -> Spare | None:
        """
        A new spare VM (not started) for ``template``, kept next to it (with
        a tap of its own when the template has a network); ``None`` when the
        template is not the ready one of its key, its pool is full (as many
        spares starting or ready as a group wants), one is being started (one
        at a time), or a clone of it is being made.
        """
        key = template.key
        pool = self._pool(key)
        if (self._ready.get(key) != template or len(pool) >= self._wanted.get(key, 0)
                or any(spare.phase.starting() for spare in pool) or self._cloning.get(key)):
            return None
        name = os.urandom(3).hex()
        while os.path.exists(os.path.join(template.directory, SPARE_PREFIX + name)):
            name = os.urandom(3).hex()
        try:
            spare = Spare(template, os.path.join(template.directory, SPARE_PREFIX + name),
                          SPARE_TAP_PREFIX + name if key.network else None)
        except Internal as error:
            log.warn("no spare VM for template {digest}: {error}", digest=key.digest(), error=error)
            return None
        self._spares.setdefault(key, []).append(spare)
        return spare

    def take_spare(self, template: Template) -> Spare | None:
        """A ready spare of ``template``, now the caller's (no other caller gets it), or ``None``."""
        pool = self._pool(template.key)
        for spare in pool:
            if spare.template == template and spare.phase.take():
                pool.remove(spare)
                return spare
        return None

    def _pool(self, key: TemplateKey) -> list[Spare]:
        """``key``'s spares that hold memory (starting or ready), the others forgotten."""
        pool = self._spares.get(key, [])
        pool[:] = [spare for spare in pool if spare.phase.holds()]
        if not pool:
            self._spares.pop(key, None)
        return pool

    def clone_began(self, key: TemplateKey) -> None:
        """A clone of ``key``'s template is being made (no spare is started meanwhile)."""
        self._cloning[key] = self._cloning.get(key, 0) + 1

    def clone_ended(self, key: TemplateKey) -> bool:
        """A clone of ``key``'s template is made or failed: whether no other one is being made."""
        left = self._cloning.pop(key, 1) - 1
        if left:
            self._cloning[key] = left
        return not left

    def wants_spare(self, key: TemplateKey, count: int) -> int:
        """
        How many spares ``key``'s template keeps: the most any group that
        uses it asked for (``count``: what the caller's group asks for).
        """
        wanted = max(self._wanted.get(key, 0), count)
        if wanted:
            self._wanted[key] = wanted
        return wanted

    def spare_ram(self) -> list[int]:
        """The guest RAM of each spare that holds memory (starting or ready), for admission."""
        return [spare.template.key.ram_bytes for pool in self._spares.values() for spare in pool
                if spare.phase.holds()]

    def _kill_spares(self, key: TemplateKey) -> None:
        for spare in self._spares.pop(key, []):
            spare.kill()

    def _delete(self, template: Template, keep_disk: bool) -> None:
        for path in (template.ram_file, template.device_state, template.empty_overlay):
            discard(path)
        if not keep_disk:
            shutil.rmtree(template.directory, ignore_errors=True)

    def collect(self, referenced: set[str], spares: Iterable[str] = ()) -> None:
        """
        Delete what no template in use and no node needs: template
        directories whose frozen disk no record in ``referenced`` names (the
        frozen disks of the records' disks), spare directories in the others
        that are neither a spare of this run nor in ``spares`` (the
        directories of the spares nodes were handed), and RAM files of
        templates this run does not know (an earlier run's).
        """
        live = {template.directory for template in self._ready.values()}
        live |= {os.path.dirname(path) for path in referenced}
        kept = set(spares) | {spare.directory for pool in self._spares.values() for spare in pool}
        for name in _listdir(self.directory):
            path = os.path.join(self.directory, name)
            if path not in live and not self._is_building(name):
                log.info("removing unused template files {path}", path=path)
                shutil.rmtree(path, ignore_errors=True)
            elif path in live:
                for inner in _listdir(path):
                    spare = os.path.join(path, inner)
                    if inner.startswith(SPARE_PREFIX) and spare not in kept:
                        log.info("removing unused spare VM files {path}", path=spare)
                        shutil.rmtree(spare, ignore_errors=True)
        known = {os.path.basename(template.ram_file) for template in self._ready.values()}
        for name in _listdir(self.ram_directory):
            if name not in known and not self._is_building(name):
                discard(os.path.join(self.ram_directory, name))

    def _is_building(self, name: str) -> bool:
        """Whether ``name`` is a build's under way (not an earlier template's of the same key)."""
        return name in self._building_names

    def close(self) -> None:
        """
        The daemon stops: builds under way are cancelled (their VMs killed),
        spare VMs killed, the RAM files go (the frozen disks stay for the nodes on disk).
        """
        for run in list(self._runs.values()):
            run.cancel()
        for key in list(self._spares):
            self._kill_spares(key)
        for key in list(self._ready):
            self.discard(key)
        try:
            os.rmdir(self.ram_directory)
        except OSError:
            pass


async def _run(build: Build, template: Template) -> None:
    await build(template)


def _listdir(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


__all__ = ["Build", "RETRY_AFTER", "TemplateStore", "TemplateUnavailable", "ram_directory"]
