# -*- test-case-name: tests.nodes.test_admission -*-
"""
Admission: never more than the host can hold.

Every operation that starts a VM asks here first, before it makes anything:

- **Memory.** One host-wide budget (``admission.memory_budget``; by default
  the host's RAM less a reserve for the host and the templates' tmpfs
  budget, :func:`limits`).  A VM is taken to hold its guest RAM plus
  ``admission.vm_overhead`` (QEMU itself and its TCG translation cache).
  What is in use is *derived*, never kept as a tally that could drift: the
  nodes whose VM this daemon runs now (paused ones too; stopped and
  suspended ones hold nothing), plus the :class:`Claim` of each operation
  under way (a create, restore, relaunch or fork), which covers its VMs
  until they run or the operation failed (and each spare VM, :mod:`.warm.spare`).  A claim named after its node
  (:meth:`Claim.name`) stands in for that node, so nothing counts twice
  (a fork's claim is not named: its children count twice for the second
  the fork takes, never less than they hold).
  Whatever ends a VM (a stop, a suspend, a delete, a crash) gives its memory
  back by the same token: the node no longer has a VM.  A request that does
  not fit is refused with :class:`~vmservice.errors.InsufficientMemory`.
- **Nodes per group.** A group's ``max_nodes`` counts its nodes whatever their
  status, plus the new nodes of creates and forks under way; one more is
  refused with a 409 ``max_nodes_reached``.
- **Cold boots.** At most ``admission.boot_concurrency`` VMs boot at once
  (:class:`BootQueue`); the others wait in order, each within its own
  timeout.  A boot holds its slot from its VM's start until its agent first
  answers, its VM ends, or :data:`BOOT_SLOT_LIMIT` passed.  Clones of warm
  templates, fork children and restores load a saved state instead of
  booting, and take no slot.

Knows no HTTP: the API maps the errors (:func:`vmservice.errors.http_error`).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Coroutine, Iterable, Mapping, TypeVar

from attrs import field, frozen
from twisted.internet.defer import Deferred, TimeoutError as DeferredTimeout, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import Clock

from ..config import Config
from ..errors import Conflict, InsufficientMemory, WaitTimeout

_T = TypeVar("_T")

MiB = 1024**2
GiB = 1024**3

#: The longest a cold boot holds its slot: a guest whose agent never answers
#: (and whose creator did not wait for it) must not hold the queue forever.
BOOT_SLOT_LIMIT = 120.0

#: The least kept for the host itself out of the default budget.
MIN_HOST_RESERVE = 1 * GiB


@frozen
class Limits:
    """
    What admission allows, resolved at start.

    :ivar budget: bytes the VMs may hold at once; ``None`` for no budget.
    :ivar overhead: bytes a VM is taken to hold beyond its guest RAM.
    :ivar boot_concurrency: cold boots at once; 0 for no bound.
    :ivar max_nodes: each group's ``max_nodes``, for the groups that have one.
    :ivar explained: how :attr:`budget` was found, for the log.
    """

    budget: int | None = None
    overhead: int = 0
    boot_concurrency: int = 0
    max_nodes: Mapping[str, int] = field(factory=dict)
    explained: str = "no budget"


def mem_total(meminfo: str) -> int | None:
    """The host's RAM in bytes from the text of ``/proc/meminfo``; ``None`` when it is not there."""
    for line in meminfo.splitlines():
        name, _, value = line.partition(":")
        if name == "MemTotal":
            number, _, unit = value.strip().partition(" ")
            return int(number) * (1024 if unit.strip() == "kB" else 1)
    return None


def host_reserve(total: int) -> int:
    """
    What the default budget leaves to the host itself: a tenth of its RAM, at
    least :data:`MIN_HOST_RESERVE` (its kernel, the page cache of images and
    disks, this daemon, everything else that runs there).
    """
    return max(MIN_HOST_RESERVE, total // 10)


def limits(config: Config, meminfo: str | None, cpus: int | None) -> Limits:
    """
    The limits of ``config.admission`` with its defaults filled in from the host.

    :param meminfo: the text of ``/proc/meminfo``; ``None`` when unreadable
        (then there is no default budget).
    :param cpus: the host's CPU count; the default ``boot_concurrency`` is
        twice it: a boot also waits, so one per core leaves the CPU partly
        idle (the measurements are in ``docs/configuration.md``).
    """
    settings = config.admission
    max_nodes = {g.name: g.max_nodes for g in config.host_groups if g.max_nodes is not None}
    concurrency = settings.boot_concurrency if settings.boot_concurrency is not None else 2 * max(1, cpus or 1)
    budget, explained = settings.memory_budget, "admission.memory_budget"
    total = mem_total(meminfo) if meminfo is not None else None
    if budget is None and total is not None:
        reserve = host_reserve(total)
        budget = max(total - reserve - config.templates_tmpfs_budget, total // 4)
        explained = (f"MemTotal {total // MiB} MiB - host reserve {reserve // MiB} MiB - "
                     f"templates_tmpfs_budget {config.templates_tmpfs_budget // MiB} MiB")
    elif budget is None:
        explained = "no budget (MemTotal unknown)"
    return Limits(budget, settings.vm_overhead, concurrency, max_nodes, explained)


@frozen
class Holder:
    """One node as admission sees it.

    :ivar hostname: its name.
    :ivar hostgroup: its group.
    :ivar ram_bytes: its guest RAM.
    :ivar running: whether this daemon runs a VM for it now (paused included).
    """

    hostname: str
    hostgroup: str
    ram_bytes: int
    running: bool


@frozen
class AdmissionState:
    """
    Admission now, for ``/metrics``.

    :ivar budget: the memory budget in bytes; ``None`` for none.
    :ivar used: bytes held by running VMs and reserved by operations under way.
    :ivar reserved: the part of :attr:`used` reserved by operations under way.
    :ivar boot_slots: the bound on cold boots at once; 0 for none.
    :ivar booting: cold boots holding a slot now.
    :ivar waiting: cold boots waiting for a slot.
    :ivar refusals: refusals so far by reason (``memory``, ``max_nodes``, ``boot_timeout``).
    """

    budget: int | None
    used: int
    reserved: int
    boot_slots: int
    booting: int
    waiting: int
    refusals: Mapping[str, int]


class Claim:
    """
    Memory (and places in a group) reserved for an operation under way,
    until it :meth:`release` s it: the operation's VMs then run (and count as
    running nodes) or failed (and hold nothing).

    :ivar size: the bytes it reserves.
    :ivar group: the group it makes new nodes in; ``None`` when it starts an
        existing node again.
    :ivar count: how many new nodes.
    :ivar hostname: the node it stands in for, once there is one.
    """

    def __init__(self, release: Callable[["Claim"], None], size: int, group: str | None, count: int,
                 hostname: str | None) -> None:
        self._release, self.size, self.group, self.count, self.hostname = release, size, group, count, hostname
        self.released = False

    def name(self, hostname: str) -> None:
        """The node it is for exists now (registered, no VM yet): the claim stands in for it."""
        self.hostname = hostname

    def release(self) -> None:
        """Give the reservation back (once, however often it is called)."""
        if not self.released:
            self.released = True
            self._release(self)


class BootSlot:
    """
    One of the cold boots allowed at once, held until :meth:`release`.

    :param clock: for the longest hold.
    :param freed: called once when it is released.
    """

    def __init__(self, clock: IReactorTime, freed: Callable[[], None]) -> None:
        self._clock = clock
        self._freed: Callable[[], None] | None = freed
        self._timer: IDelayedCall | None = None

    def release(self) -> None:
        """Let the next boot go (once, however often it is called)."""
        freed, self._freed = self._freed, None
        if freed is None:
            return
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        freed()

    def hold(self, *events: "Deferred[Any]", limit: float = BOOT_SLOT_LIMIT) -> None:
        """
        Release the slot when the first of ``events`` fires (whatever its
        outcome: they are the caller's own Deferreds, consumed here), or after
        ``limit`` seconds.
        """
        for event in events:
            event.addBoth(lambda _: self.release())
        if self._freed is not None:
            self._timer = self._clock.callLater(limit, self.release)


class BootQueue:
    """
    The cold boots allowed at once, and the boots waiting for one, first come
    first served.

    :param clock: times the waits.
    :param bound: boots at once; 0 for no bound (every boot goes at once).
    """

    def __init__(self, clock: IReactorTime, bound: int) -> None:
        self._clock = clock
        self.bound = bound
        self.booting = 0
        self._waiting: deque[Deferred[BootSlot]] = deque()

    @property
    def waiting(self) -> int:
        """Boots waiting for a slot."""
        return len(self._waiting)

    def _room(self) -> bool:
        return self.bound == 0 or self.booting < self.bound

    def take(self, timeout: float) -> Deferred[BootSlot]:
        """
        A slot: at once when one is free and nobody waits, else after those
        before.  Fails with Twisted's ``TimeoutError`` past ``timeout``
        seconds; cancelling it leaves the queue too.
        """
        if not self._waiting and self._room():
            return succeed(self._grant())
        waiter: Deferred[BootSlot] = Deferred(self._leave)
        self._waiting.append(waiter)
        waiter.addTimeout(timeout, self._clock)
        return waiter

    def _leave(self, waiter: Deferred[BootSlot]) -> None:
        if waiter in self._waiting:
            self._waiting.remove(waiter)

    def _grant(self) -> BootSlot:
        self.booting += 1
        return BootSlot(self._clock, self._freed)

    def _freed(self) -> None:
        self.booting -= 1
        while self._waiting and self._room():
            self._waiting.popleft().callback(self._grant())


class Admission:
    """
    The memory budget, the groups' ``max_nodes`` and the cold boots of one daemon.

    :param clock: times the waits for a boot slot.
    :param limits: what it allows.
    """

    def __init__(self, clock: IReactorTime, limits: Limits) -> None:
        self.limits = limits
        self.boots = BootQueue(clock, limits.boot_concurrency)
        self._claims: list[Claim] = []
        self._nodes: Callable[[], Iterable[Holder]] = lambda: ()
        self._spares: Callable[[], Iterable[int]] = lambda: ()
        self._refusals = {"memory": 0, "max_nodes": 0, "boot_timeout": 0}

    @classmethod
    def unlimited(cls) -> "Admission":
        """Admission that admits everything at once (no budget, no bound)."""
        return cls(Clock(), Limits())

    def watch(self, nodes: Callable[[], Iterable[Holder]], spares: Callable[[], Iterable[int]] = lambda: ()) -> None:
        """Read the daemon's nodes from ``nodes`` (the fleet's registry), its spare VMs' RAM from ``spares``."""
        self._nodes, self._spares = nodes, spares

    def room_for(self, ram_bytes: int) -> bool:
        """Whether a spare VM of ``ram_bytes`` and a create's VM of as much fit the budget now."""
        return self.limits.budget is None or self.used()[0] + 2 * self.cost(ram_bytes) <= self.limits.budget

    def cost(self, ram_bytes: int) -> int:
        """What a VM of ``ram_bytes`` guest RAM is taken to hold."""
        return ram_bytes + self.limits.overhead

    def used(self) -> tuple[int, int]:
        """Bytes in use (running VMs and claims) and the part of them that claims reserve."""
        claimed = {claim.hostname for claim in self._claims if claim.hostname is not None}
        reserved = sum(claim.size for claim in self._claims)
        running = sum(self.cost(node.ram_bytes) for node in self._nodes()
                      if node.running and node.hostname not in claimed)
        running += sum(self.cost(ram_bytes) for ram_bytes in self._spares())
        return running + reserved, reserved

    def admit(self, ram_bytes: int, *, count: int = 1, group: str | None = None, hostname: str | None = None) -> Claim:
        """
        Reserve what ``count`` VMs of ``ram_bytes`` need, or refuse.

        :param group: the group ``count`` new nodes are made in (checked
            against its ``max_nodes``); ``None`` to start an existing node
            again (``hostname``).
        :raise Conflict: (``max_nodes_reached``) the group would have more
            nodes than its ``max_nodes``.
        :raise InsufficientMemory: the VMs would take the daemon past its budget.
        """
        if group is not None:
            self._check_nodes(group, count)
        wanted = count * self.cost(ram_bytes)
        budget = self.limits.budget
        used, _ = self.used()
        if budget is not None and used + wanted > budget:
            self._refusals["memory"] += 1
            raise InsufficientMemory(
                f"not enough memory on this host for {count} more VM(s) of {ram_bytes // MiB} MiB: "
                f"{wanted // MiB} MiB needed (RAM plus {self.limits.overhead // MiB} MiB each), "
                f"{used // MiB} of the {budget // MiB} MiB budget in use; stop, suspend or delete nodes, "
                "or retry later"
            )
        claim = Claim(self._claims.remove, wanted, group, count, hostname)
        self._claims.append(claim)
        return claim

    def _check_nodes(self, group: str, count: int) -> None:
        most = self.limits.max_nodes.get(group)
        if most is None:
            return
        nodes = sum(1 for node in self._nodes() if node.hostgroup == group)
        nodes += sum(claim.count for claim in self._claims if claim.group == group and claim.hostname is None)
        if nodes + count > most:
            self._refusals["max_nodes"] += 1
            raise Conflict(f"host group {group!r} has {nodes} node(s) (or being made) of its max_nodes {most}; "
                           "delete one first", code="max_nodes_reached")

    async def admitted(self, work: Coroutine[Any, Any, _T], ram_bytes: int, count: int, group: str) -> _T:
        """
        Run ``work`` (which makes ``count`` new nodes of ``ram_bytes`` in
        ``group``) under a claim, released when it is over; refused before it
        starts (it is then closed, never run).
        """
        try:
            claim = self.admit(ram_bytes, count=count, group=group)
        except BaseException:
            work.close()
            raise
        try:
            return await work
        finally:
            claim.release()

    async def boot_slot(self, timeout: float, what: str) -> BootSlot:
        """
        A slot for one cold boot of ``what`` (a node's name, for the message),
        waiting in turn for at most ``timeout`` seconds.

        :raise WaitTimeout: no slot came in time (the caller makes nothing, or
            undoes what it made).
        """
        try:
            return await self.boots.take(timeout)
        except DeferredTimeout:
            self._refusals["boot_timeout"] += 1
            raise WaitTimeout(
                f"{what} waited {timeout:g} s for one of the {self.boots.bound} cold boot slots "
                "(admission.boot_concurrency) without getting one"
            ) from None

    def state(self) -> AdmissionState:
        """Admission now (for ``/metrics``)."""
        used, reserved = self.used()
        return AdmissionState(self.limits.budget, used, reserved, self.boots.bound, self.boots.booting,
                              self.boots.waiting, dict(self._refusals))


__all__ = [
    "Admission", "AdmissionState", "BOOT_SLOT_LIMIT", "BootQueue", "BootSlot", "Claim", "Holder", "Limits",
    "host_reserve", "limits", "mem_total",
]
