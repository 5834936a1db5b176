# -*- test-case-name: tests.nodes.test_room -*-
"""
The state directory's room: an operation that could not write what it had
to write there (a record, a disk, a snapshot, a template's files) because
the file system is full (``ENOSPC``) or the daemon's quota is used up
(``EDQUOT``) fails with :class:`~vmservice.errors.StateDirFull`, which says
so, instead of an internal error.  The operation itself removes what it made
(its own failure path), so nothing half-written is left, and the same
request succeeds once there is room again.

A running node's VM that finds no room for its disk's writes is stopped by
QEMU with the write pending; :class:`RoomWatch` lets it run on once there is
room (see :meth:`.runtime.NodeRuntime.own`).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Awaitable, Callable, Iterator, Protocol, TypeVar

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..errors import AgentError, GuestErrorKind, StateDirFull, no_room
from ..guestport.guest import IGuestConnection
from ..hypervisors.base import HypervisorError, IMachine
from ..observer import OneShotObserver
from .model import NodeRecord, Status
from .readiness import first_of

log = Logger()

_T = TypeVar("_T")


def full(what: str, error: BaseException) -> StateDirFull:
    """The error of ``what`` not fitting in the state directory, ``error`` saying why."""
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return StateDirFull(f"the state directory has no room for {what}: {reason}; nothing of it was kept, "
                        f"and the same request succeeds once there is room")


@contextmanager
def room_for(what: str) -> Iterator[None]:
    """
    Run the block; a failure of it for lack of room (:func:`~vmservice.errors.no_room`:
    the error or one it was raised from) becomes :class:`StateDirFull` naming ``what``.
    Any other failure passes as it is.
    """
    try:
        yield
    except StateDirFull:
        raise
    except Exception as error:
        if not no_room(error):
            raise
        raise full(what, error) from error




def free_bytes(path: str) -> int:
    """The bytes the file system holding ``path`` has free for the daemon (``statvfs``)."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


class RoomWatch(Service):
    """
    The nodes whose VM stopped because the state directory had no room for
    its disk's writes (:meth:`IMachine.on_no_room`), let run on once it has
    room: while one waits, the directory's free space is looked at every
    :attr:`INTERVAL` seconds, and once :attr:`MIN_ROOM` bytes are free, each
    waiting node is let go on (its VM resumed: QEMU retries the write it
    stopped on, and stops again if there is still no room for it, which
    makes the node wait again).

    :param clock: times the looks.
    :param state_dir: the daemon's state directory.
    :param free: the bytes free for the daemon on the file system of a path.
    """

    name = "room-watch"

    #: Seconds between looks at the free space while a node waits.
    INTERVAL = 2.0
    #: Bytes that must be free before a waiting node's VM is let run on.
    MIN_ROOM = 32 << 20

    def __init__(self, clock: IReactorTime, state_dir: str, free: Callable[[str], int] = free_bytes) -> None:
        self._state_dir = state_dir
        self._free = free
        self._waiting: dict[str, Callable[[], Awaitable[None]]] = {}
        self._loop = LoopingCall(self._look)
        self._loop.clock = clock

    def wait(self, hostname: str, go_on: Callable[[], Awaitable[None]]) -> None:
        """Call ``go_on`` once the state directory has room (again), for node ``hostname``."""
        self._waiting[hostname] = go_on
        if not self._loop.running:
            self._loop.start(self.INTERVAL, now=False)

    @property
    def waiting(self) -> list[str]:
        """The nodes waiting for room, by hostname."""
        return sorted(self._waiting)

    async def look_now(self, hostname: str) -> None:
        """
        Look at the free space at once for node ``hostname`` (a request for its
        guest came): if it waits and there is room now, it goes on (its
        ``go_on`` awaited) without waiting for the next look.
        """
        if hostname not in self._waiting:
            return
        free = self._room()
        if free is None:
            return
        go_on = self._waiting.pop(hostname)
        self._stop_when_idle()
        log.info("the state directory has room again ({free} bytes): node {hostname} runs on",
                 free=free, hostname=hostname)
        await go_on()

    def _room(self) -> int | None:
        """The bytes free, if at least :attr:`MIN_ROOM`; ``None`` for less, or when they cannot be seen."""
        try:
            free = self._free(self._state_dir)
        except OSError as error:
            log.warn("cannot see the free space of {path}: {error}", path=self._state_dir, error=error)
            return None
        return free if free >= self.MIN_ROOM else None

    def _stop_when_idle(self) -> None:
        if not self._waiting and self._loop.running:
            self._loop.stop()

    def _look(self) -> None:
        free = self._room()
        if free is None:
            return
        waiting, self._waiting = self._waiting, {}
        for hostname, go_on in waiting.items():
            log.info("the state directory has room again ({free} bytes): node {hostname} runs on",
                     free=free, hostname=hostname)
            Deferred.fromCoroutine(_call(go_on)).addErrback(_failed, hostname)
        self._stop_when_idle()

    def stopService(self) -> None:
        """Stop looking (the daemon stops)."""
        super().stopService()  # type: ignore[no-untyped-call]  # Twisted's Service is not annotated
        self._waiting.clear()
        if self._loop.running:
            self._loop.stop()


async def _call(go_on: Callable[[], Awaitable[None]]) -> None:
    await go_on()


def _failed(failure: Failure, hostname: str) -> None:
    log.failure("node {hostname} could not run on", failure, hostname=hostname)



class _Node(Protocol):
    """What :class:`NodeRoom` sees of its node (a :class:`.runtime.NodeRuntime`)."""

    record: NodeRecord
    machine: IMachine | None
    agent: IGuestConnection | None

    @property
    def hostname(self) -> str: ...


class NodeRoom:
    """
    Whether a node's VM is stopped because the state directory had no room
    for its disk's writes, and what follows: what runs in its guest is cut
    off (answered 507 ``state_dir_full``), and so is what asks for its guest
    meanwhile (:meth:`check`); it runs on once there is room (:class:`RoomWatch`).

    :param node: the node.
    :param watch: lets it run on once there is room; ``None``: it stays stopped.
    :ivar out: whether the VM is stopped for lack of room now.
    """

    def __init__(self, node: _Node, watch: RoomWatch | None) -> None:
        self._node = node
        self._watch = watch
        self.out = False
        self._gone: OneShotObserver[None] = OneShotObserver()

    def _words(self) -> str:
        return (f"the VM of node {self._node.hostname!r} is stopped: the state directory has no room for its "
                f"disk's writes (what ran in it was cut off); it runs on once there is room")

    def stopped(self, machine: IMachine) -> None:
        """``machine`` stopped on a write the state directory had no room for (told again: nothing new)."""
        node = self._node
        if machine is not node.machine or self.out:
            return
        self.out = True
        log.error("node {hostname}: its VM stopped: the state directory has no room for its disk's writes; "
                  "it runs on once there is room", hostname=node.hostname)
        self._gone.fire(None)
        if node.agent is not None:
            node.agent.interrupt(AgentError(GuestErrorKind.HOST_NO_ROOM, self._words()))
        if self._watch is not None:
            self._watch.wait(node.hostname, lambda: self._again(machine))

    async def _again(self, machine: IMachine) -> None:
        """There is room again: the VM runs on, unless it is no longer the node's or the node is not Running."""
        node = self._node
        if machine is not node.machine or not self.out:
            return
        self.out, self._gone = False, OneShotObserver()
        if node.record.status is not Status.RUNNING:
            return  # paused, being suspended, ...: whoever lets it run again retries the write
        try:
            await machine.resume()
        except HypervisorError as error:
            log.warn("node {hostname}: its VM could not run on: {error}", hostname=node.hostname, error=error)
            self.stopped(machine)

    async def check(self) -> None:
        """
        Whether the guest may be asked for something: a VM stopped for lack of
        room is let run on at once if there is room now (:meth:`RoomWatch.look_now`),
        rather than at the watch's next look.

        :raise StateDirFull: the VM is stopped for lack of room still.
        """
        if self.out and self._watch is not None:
            await self._watch.look_now(self._node.hostname)
        if self.out:
            raise StateDirFull(self._words())

    def unless_stopped(self, waited: "Deferred[_T]") -> "Deferred[_T]":
        """
        ``waited``'s outcome, or :class:`StateDirFull` as soon as the VM
        stops for lack of room (``waited`` is then cancelled).
        """

        async def race() -> _T:
            index, value = await first_of(waited, self._gone.when_fired())
            if index == 1:
                raise StateDirFull(self._words())
            result: _T = value
            return result

        return Deferred.fromCoroutine(race())


__all__ = ["NodeRoom", "RoomWatch", "free_bytes", "full", "room_for"]
