# -*- test-case-name: tests.nodes.test_fleet -*-
"""
What the node layer is built from: the collaborators every part of it uses,
handed over as one frozen record instead of a long argument list.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Protocol, TypeVar

from attrs import field, frozen
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..config import Config, HostGroupConfig
from ..devices.pci import PciHost
from ..errors import BadRequest, Internal, NotFound
from ..guestport.guest import IGuestConnection
from ..hypervisors.base import IHypervisor, IVmProcesses
from ..images.store import Image, ImageInfo, ImageNotFound, list_images
from ..observer import OneShotObserver
from ..storage.interfaces import IDisks
from .addressing import Addressing
from .admission import Admission
from .events import EventHub
from .provisioning import SecretSource
from .room import RoomWatch
from .store import NodeStore

_T = TypeVar("_T")

log = Logger()


class Blocking(Protocol):
    """Runs a blocking call (a file read) off the reactor; fires with its result."""

    def __call__(self, call: Callable[[], _T]) -> Deferred[_T]: ...


class DriverChoice:
    """
    The hypervisor driver, decided once (the KVM probe takes seconds) and
    handed to everyone who asks, each with a Deferred of their own.

    :param decide: starts the decision; fires with the driver.  Cancelling
        it must end what it started (the probe's QEMU) before it fires.
    """

    def __init__(self, decide: Callable[[], Deferred[IHypervisor]]) -> None:
        self._decide = decide
        self._decided: OneShotObserver[IHypervisor] | None = None
        #: The decision once started (it may be under way or over).
        self._deciding: Deferred[IHypervisor] | None = None

    def get(self) -> Deferred[IHypervisor]:
        """The driver, once it is decided."""
        if self._decided is None:
            decided: OneShotObserver[IHypervisor] = OneShotObserver()
            self._decided = decided
            self._deciding = self._decide()
            self._deciding.addCallbacks(decided.fire, decided.error)
        return self._decided.when_fired()

    def start(self) -> None:
        """
        Begin the decision in the background, so that the first VM to start
        need not wait for all of it.  Whoever needs the driver sees a failure
        for themselves; a daemon stopped before it is over is logged.
        """
        self.get().addErrback(_undecided)

    def stop(self) -> Deferred[None]:
        """
        The daemon stops: cancel a decision under way (the KVM probe's QEMU
        is killed and reaped) and fire once it is over, whichever way it
        ended.  A decision not started yet never starts: every :meth:`get`
        then fails with ``CancelledError``.
        """
        if self._decided is None:
            self._decided = OneShotObserver()
            self._decided.error(CancelledError("the daemon stopped before the hypervisor was decided"))
            return succeed(None)
        over = self._decided.when_fired().addCallbacks(lambda _: None, lambda _: None)
        if self._deciding is not None:
            self._deciding.cancel()  # nothing when it is over
        return over


def _undecided(failure: Failure) -> None:
    if failure.check(CancelledError):
        log.info("the daemon stopped before the hypervisor was decided")


def _no_boots(group: str, seconds: float) -> None:
    """Boot durations go nowhere."""


def _no_metrics(socket: str, deadline: float) -> Deferred[Mapping[str, Any]]:
    """No metrics channel: every snapshot fails."""
    return fail(LookupError("no metrics channel is configured"))


def _no_fallbacks(group: str, kind: str) -> None:
    """Warm nodes booted cold go uncounted."""


def _no_idle(group: str, what: str, seconds: float) -> None:
    """Automatic suspends and wakes go uncounted."""


def _wall_hub() -> EventHub:
    return EventHub(time.time)


@frozen
class FleetParts:
    """
    The collaborators of the node layer.

    :ivar clock: times boots, waits and timeouts.
    :ivar config: the loaded configuration.
    :ivar store: where node records live.
    :ivar driver: the hypervisor driver, once decided.
    :ivar vms: the VMs an earlier run left: adopted, found and killed
        without waiting for the driver's decision.
    :ivar images: resolves an image name to an :class:`Image`.
    :ivar disks: creates and removes node disks.
    :ivar agents: makes the agent connection of a node from its socket path.
    :ivar addressing: addresses and the host side of VM networks.
    :ivar blocking: runs a blocking call off the reactor (console reads).
    :ivar secrets: the secrets store, whose secrets nodes get.
    :ivar codehost_keys: fetches the SSH keys a user publishes on the code
        host (``codehost_user``); None when no code host is configured.
    :ivar on_boot: called with ``(group, seconds)`` when a node's agent first
        answers after a boot, for the boot-duration metric.
    :ivar on_restore: called with ``(group, seconds)`` when a node's VM runs
        again after a restore, for the restore-duration metric.
    :ivar events: where the nodes' lifecycle events are published.
    :ivar stop_grace: seconds a graceful stop waits before it kills.
    :ivar wall_clock: the time in nanoseconds since the epoch, given to
        guests whose clock stood still (resume, restore).
    :ivar pci: the host's PCI devices, checked before one is given to a node.
    :ivar snapshots: asks a node's metrics socket for one snapshot's fields
        within a deadline (seconds).
    :ivar on_clone: called with ``(group, seconds)`` for each node cloned:
        from its disk's creation to its VM running with its identity adopted.
    :ivar on_warm_fallback: called with ``(group, kind)`` each time a warm
        group's node boots cold instead (``kind`` says why, for the metric).
    :ivar admission: the memory budget, ``max_nodes`` and the cold boots
        queue every start of a VM goes through; admits everything by default.
    :ivar on_idle: called with ``(group, what, seconds)`` for each automatic
        suspend and wake (see :mod:`.idling`), for the metrics.
    :ivar room: lets nodes whose VM stopped for lack of room in the state
        directory run on once it has room; ``None``: they stay stopped.
    """

    clock: IReactorTime
    config: Config
    store: NodeStore
    driver: DriverChoice
    vms: IVmProcesses
    images: Callable[[str], Image]
    disks: IDisks
    agents: Callable[[str], IGuestConnection]
    addressing: Addressing
    blocking: Blocking
    secrets: SecretSource | None = None
    codehost_keys: Callable[[str], Deferred[tuple[str, ...]]] | None = None
    on_boot: Callable[[str, float], None] = field(default=_no_boots)
    on_restore: Callable[[str, float], None] = field(default=_no_boots)
    events: EventHub = field(factory=_wall_hub)
    stop_grace: float = 10.0
    wall_clock: Callable[[], int] = field(default=time.time_ns)
    pci: PciHost = field(factory=PciHost)
    snapshots: Callable[[str, float], Deferred[Mapping[str, Any]]] = field(default=_no_metrics)
    on_clone: Callable[[str, float], None] = field(default=_no_boots)
    on_warm_fallback: Callable[[str, str], None] = field(default=_no_fallbacks)
    admission: Admission = field(factory=Admission.unlimited)
    on_idle: Callable[[str, str, float], None] = field(default=_no_idle)
    room: RoomWatch | None = None

    def group(self, name: str) -> HostGroupConfig:
        """
        The host group ``name``.

        :raise NotFound: (``hostgroup_not_found``) there is none.
        """
        group = self.config.group(name)
        if group is None:
            raise NotFound(f"host group {name!r} not found", code="hostgroup_not_found")
        return group

    def image(self, group: HostGroupConfig, name: str = "") -> Image:
        """
        The image ``name``, or ``group``'s when it is empty: the image of a
        node whose record names ``name``.

        :raise Internal: (``image_not_found``) it is not built (any more).
        """
        try:
            return self.images(name or group.image)
        except ImageNotFound as error:
            raise Internal(str(error), code="image_not_found") from error

    def requested_image(self, group: HostGroupConfig, name: str | None) -> Image:
        """
        The image a create asks for: ``name`` (``disk_image``), or
        ``group``'s image when it is ``None``.

        :raise BadRequest: (``unknown_image``) there is no built image
            ``name``; the message names those there are.  (``image_too_large``)
            its root file system is larger than the group's ``storage_size``.
        :raise Internal: (``image_not_found``) the group's image is not built.
        """
        if name is None:
            return self.image(group)
        try:
            image = self.images(name)
        except ImageNotFound:
            built = ", ".join(info.name for info in self.image_list()) or "none"
            raise BadRequest(f"disk_image: no image {name[:64]!r} is built; the images are: {built}",
                             code="unknown_image") from None
        size = image.rootfs.getsize()
        if size > group.storage_size:
            raise BadRequest(f"disk_image: the root file system of image {name!r} ({size} bytes) is larger than "
                             f"host group {group.name!r}'s storage_size ({group.storage_size} bytes)",
                             code="image_too_large")
        return image

    def image_list(self) -> list[ImageInfo]:
        """The images built in the configured image directory (blocking: reads their manifests)."""
        return list_images(self.config.image_dir)


__all__ = ["Blocking", "DriverChoice", "FleetParts"]
