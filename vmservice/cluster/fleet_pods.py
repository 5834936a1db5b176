# -*- test-case-name: tests.cluster.test_fleet_pods -*-
"""
:class:`FleetPods`: the pod provider over the fleet (the domain): a pod's
VM is a node of its host group tagged with the pod
(:mod:`.pod_naming`), made with ``wait=agent``; its environment is a
secret of the secrets store, removed with the VM.  The fleet's lifecycle
events (not a poll) say when a VM's agent comes or goes and when it ends,
and each is told to the controller as the pod's uid.  Knows no Kubernetes
HTTP and no watch.
"""

from __future__ import annotations

import re
from typing import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ..errors import NotFound, ServiceError, WaitTimeout
from ..nodes.events import EventType, NodeEvent
from ..nodes.fleet import Fleet
from ..nodes.model import CreateRequest, NodeRecord, Status, Wait
from ..nodes.transitions import Op
from ..secretstore import SecretStore
from ..secretstore.records import SecretSpec
from .pod_env import env_file, sourcing
from .pod_object import PodKey
from .pod_naming import ENV_SECRET_PREFIX, ENV_SECRET_SUFFIX, UID_TAG, env_secret, pod_tags, read_tags, vm_hostname
from .pod_provider import GONE, PodVm, VmPhase, VmState
from .pod_spec import PodRejected, PodSpec

log = Logger(namespace="vmservice.cluster")

#: Statuses in which a pod's VM runs (or is kept asleep): Running once its agent answered.
_UP = frozenset({Status.RUNNING, Status.PAUSED, Status.SUSPENDED, Status.SUSPENDING, Status.RESTORING,
                 Status.STOPPING})


def failure_reason(error: BaseException) -> tuple[str, str]:
    """A failed create as a pod's reason (CamelCase, from the domain's code) and message."""
    if isinstance(error, PodRejected):
        return error.reason, error.message
    if isinstance(error, WaitTimeout):
        return "BootTimeout", str(error)[:300]
    if isinstance(error, ServiceError):
        return "".join(part.capitalize() for part in re.split(r"[_\W]+", error.code) if part), str(error)[:300]
    return "CreateFailed", f"{type(error).__name__}: {error}"[:300]


class FleetPods:
    """
    The VMs made for the pods of Node ``node_name``.

    :param clock: times a graceful shutdown.
    :param fleet: the nodes.
    :param secrets: where a pod's environment is kept (``None``: pods with
        an environment fail).
    :param node_name: the Node's name (its VMs' tag).
    :param boot_timeout: seconds a VM may take until its agent answers.
    """

    def __init__(self, clock: IReactorTime, fleet: Fleet, secrets: SecretStore | None, node_name: str,
                 boot_timeout: float) -> None:
        self._clock, self._fleet, self._secrets = clock, fleet, secrets
        self._node_name, self._boot_timeout = node_name, boot_timeout
        self._ready: set[str] = set()
        self._listeners: list[Callable[[str], None]] = []
        self._ended: dict[str, list[Deferred[None]]] = {}
        self.stop_listening = fleet.events.listen(self._heard)

    # -- what the fleet tells ---------------------------------------------

    def _heard(self, event: NodeEvent) -> None:
        if event.type is EventType.AGENT_UP:
            self._ready.add(event.hostname)
        elif event.type in (EventType.AGENT_DOWN, EventType.DELETED, EventType.STOPPED):
            self._ready.discard(event.hostname)
        if event.type in (EventType.DELETED, EventType.STOPPED):
            for waiting in self._ended.pop(event.hostname, []):
                waiting.callback(None)
        tags = read_tags(event.tags)
        if tags is not None and tags.node_name == self._node_name:
            for listener in list(self._listeners):
                listener(tags.key.uid)

    def notify(self, changed: Callable[[str], None]) -> Callable[[], None]:
        """Call ``changed`` with a pod's uid whenever its VM changes."""
        self._listeners.append(changed)
        return lambda: self._listeners.remove(changed) if changed in self._listeners else None

    # -- queries -------------------------------------------------------------

    def _record(self, key: PodKey) -> NodeRecord | None:
        for record in self._fleet.list(tag=UID_TAG + key.uid):
            tags = read_tags(record.tags)
            if tags is not None and tags.node_name == self._node_name:
                return record
        return None

    def _state(self, record: NodeRecord) -> VmState:
        started = record.created_at.timestamp()
        if record.status is Status.STOPPED:
            return VmState(VmPhase.FAILED, record.hostname, record.ip, started, "VmStopped", "the VM stopped")
        if record.status is Status.DELETING:
            return GONE
        ready = record.status in _UP and record.hostname in self._ready
        return VmState(VmPhase.RUNNING if ready else VmPhase.BOOTING, record.hostname, record.ip, started)

    def state(self, key: PodKey) -> VmState:
        """Pod ``key``'s VM as it is now."""
        record = self._record(key)
        return GONE if record is None else self._state(record)

    def hostname(self, key: PodKey) -> str | None:
        """The hostname of pod ``key``'s VM, or ``None``."""
        record = self._record(key)
        return None if record is None else record.hostname

    def vms(self) -> list[PodVm]:
        """Every VM this daemon made for a pod of this Node."""
        found = []
        for record in self._fleet.list(tag_prefix=UID_TAG):
            tags = read_tags(record.tags)
            if tags is not None and tags.node_name == self._node_name:
                found.append(PodVm(tags.key, tags.node_name, self._state(record)))
        return found

    # -- create and delete -----------------------------------------------------

    def _taken(self, hostname: str) -> bool:
        try:
            self._fleet.node(hostname)
        except NotFound:
            return False
        return True

    def _store_env(self, key: PodKey, env: tuple[tuple[str, str], ...]) -> str:
        """The secret holding the pod's environment, written (again)."""
        if self._secrets is None:
            raise PodRejected("Unsupported", "this daemon has no secrets store for a pod's environment")
        name = env_secret(key.uid)
        self._drop_env(key)
        self._secrets.create(SecretSpec(name=name, data=env_file(env)))
        return name

    def _drop_env(self, key: PodKey) -> None:
        if self._secrets is None:
            return
        try:
            self._secrets.delete(env_secret(key.uid))
        except NotFound:
            pass
        except ServiceError as error:
            log.warn("pod {pod}: its environment secret could not be removed ({error})", pod=str(key), error=error)

    async def _create(self, spec: PodSpec, env: tuple[tuple[str, str], ...]) -> VmState:
        try:
            secret = self._store_env(spec.key, env) if env else None
            userdata = "\n".join(part for part in (sourcing(secret) if secret else "", spec.userdata) if part)
            request = CreateRequest(
                hostname=vm_hostname(spec.key, self._taken), ram_bytes=spec.ram_bytes, cpus=spec.cpus,
                persistent=spec.persistent, tags=pod_tags(spec.key, self._node_name), userdata=userdata,
                secrets=(secret,) if secret else (), ssh_keys=spec.ssh_keys)
            record = await self._fleet.create(spec.group, request, Wait.AGENT, self._boot_timeout)
        except Exception as error:
            self._drop_env(spec.key)
            reason, message = failure_reason(error)
            log.info("pod {pod}: its VM could not be made ({reason}: {message})", pod=str(spec.key), reason=reason,
                     message=message)
            return VmState(VmPhase.FAILED, reason=reason, message=message)
        self._ready.add(record.hostname)
        log.info("pod {pod}: VM {hostname} made", pod=str(spec.key), hostname=record.hostname)
        return self._state(record)

    def create(self, spec: PodSpec, env: tuple[tuple[str, str], ...]) -> "Deferred[VmState]":
        """Make the VM of ``spec``; fires with its state once its agent answered, or failed (never an error)."""
        return Deferred.fromCoroutine(self._create(spec, env))

    async def _ending(self, hostname: str, grace: float) -> None:
        """Ask VM ``hostname`` to power off, and wait until it ended or ``grace`` seconds passed."""
        ended: Deferred[None] = Deferred()
        self._ended.setdefault(hostname, []).append(ended)

        def waited() -> None:
            if not ended.called:
                ended.callback(None)

        timer = self._clock.callLater(grace, waited)
        try:
            await self._fleet.lifecycle.shutdown(hostname, Op.SHUTDOWN)
            await ended
        except ServiceError as error:
            log.info("VM {hostname}: no graceful shutdown ({error}); deleted at once", hostname=hostname, error=error)
        finally:
            if timer.active():
                timer.cancel()
            waiting = self._ended.get(hostname, [])
            if ended in waiting:
                waiting.remove(ended)

    async def _delete(self, key: PodKey, grace: float) -> None:
        record = self._record(key)
        if record is not None:
            group = self._fleet.group(record.hostgroup)
            if grace > 0 and group.graceful_shutdown and record.status is Status.RUNNING:
                await self._ending(record.hostname, grace)
            try:
                await self._fleet.delete(record.hostgroup, record.hostname)
                log.info("pod {pod}: VM {hostname} deleted", pod=str(key), hostname=record.hostname)
            except NotFound:
                pass
        self._drop_env(key)

    def delete(self, key: PodKey, grace: float) -> "Deferred[None]":
        """Delete pod ``key``'s VM (powered off within ``grace`` seconds, then killed) and its environment."""
        return Deferred.fromCoroutine(self._delete(key, grace))

    def sweep(self) -> None:
        """Remove the environment secrets of pods that have no VM here (left by a crash)."""
        if self._secrets is None:
            return
        kept = {env_secret(vm.key.uid) for vm in self.vms()}
        for meta in self._secrets.list():
            if meta.name.startswith(ENV_SECRET_PREFIX) and meta.name.endswith(ENV_SECRET_SUFFIX) and \
                    meta.name not in kept:
                try:
                    self._secrets.delete(meta.name)
                except ServiceError:
                    pass


__all__ = ["FleetPods", "failure_reason"]
