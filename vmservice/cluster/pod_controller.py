# -*- test-case-name: tests.cluster.test_pod_controller -*-
"""
:class:`PodController`: the pods bound to this Node run as VMs (Virtual
Kubelet's PodController, in Twisted).

It lists, then watches, the pods with ``fieldSelector=spec.nodeName=<node>``
(:class:`~.watch_loop.WatchLoop`), and each pod's uid goes to a work queue
(:class:`~.work_queue.WorkQueue`: one reconcile at a time per pod) when the
API or the provider says it changed.  A reconcile compares the pod (desired)
with its VM (actual, from the :class:`~.pod_provider.PodProvider`):

- a new pod: its VM is made (the pod ``Pending``, ``ContainerCreating``),
  then ``Running`` and Ready once the VM's agent answered, or ``Failed``
  with the reason (a spec refused, admission full, a boot that timed out);
- a running VM: the status follows it; one that ended fails the pod;
- ``deletionTimestamp``: the VM is shut down within the pod's grace, then
  deleted, then the pod (grace 0, on its uid only);
- a pod gone, moved to another node, or replaced (another uid): its VM is
  deleted; a pod whose VM is gone although one was made (``VmLost``) fails.

After the first listing every VM made for a pod is looked at (a restart
adopts the VMs whose pods are still here, and deletes the others).  What
happens to each pod over time is :mod:`.pod_lifecycle`'s machine.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from .api_client import Json
from .api_errors import ApiError, Forbidden, NotFound
from .backoff import Backoff
from .pod_api import PODS, PodApi
from .pod_env import environment, secret_values
from .pod_events import EventRecorder
from .pod_lifecycle import POD_MACHINE, PodCore, PodInputs
from .pod_object import PodFacts, PodKey, pod_facts
from .pod_provider import GONE, PodProvider, VmPhase, VmState
from .pod_spec import PodRejected, PodSpec
from .node_object import rfc3339
from .pod_status import creating, failed, running
from .pod_writer import PodGone, StatusWriter
from .watch_events import WatchEvent
from .watch_loop import WatchLoop
from .work_queue import WorkQueue

log = Logger(namespace="vmservice.cluster")


class PodController:
    """
    The pods of one Node, run as VMs.

    :param clock: the watch's and the retries' timers, the times written.
    :param api: the pods in the API.
    :param provider: the VMs.
    :param node_name: the Node's name.
    :param host_ip: the Node's InternalIP (each pod's ``hostIP``).
    :param parse: a pod as the VM it asks for (:func:`~.pod_spec.parse_spec`
        with this node's groups and configuration).
    :param random: numbers in [0, 1) for the back-offs' jitter.
    """

    def __init__(self, clock: IReactorTime, api: PodApi, provider: PodProvider, node_name: str, host_ip: str,
                 parse: Callable[[Json], PodSpec], random: Callable[[], float]) -> None:
        self._clock, self._api, self._provider = clock, api, provider
        self._node_name, self._host_ip, self._parse, self._random = node_name, host_ip, parse, random
        self.events = EventRecorder(api.post_event, clock.seconds, node_name)
        self._writer = StatusWriter(api)
        self._queue = WorkQueue(self._reconcile)
        self._loop = WatchLoop(clock, api.client, PODS, {"fieldSelector": f"spec.nodeName={node_name}"}, self,
                               random, list_kind="PodList")
        self.pods: dict[str, Json] = {}
        self._keys: dict[str, PodKey] = {}
        self._machines: dict[str, PodInputs] = {}
        self._retries: dict[str, IDelayedCall] = {}
        self._backoffs: dict[str, Backoff] = {}
        self._listed = False
        self._unsubscribe: Callable[[], None] = lambda: None

    def start(self) -> None:
        """Watch the pods and follow the VMs."""
        self._unsubscribe = self._provider.notify(self._queue.add)
        self._loop.start()

    def stop(self) -> None:
        """End the watch, the reconciles, the retries and the events (the VMs are left running)."""
        self._unsubscribe()
        self._loop.stop()
        self._queue.stop()
        self.events.stop()
        for retry in self._retries.values():
            if retry.active():
                retry.cancel()
        self._retries.clear()

    @property
    def idle(self) -> bool:
        """Whether nothing is pending (watch, reconciles, retries, events)."""
        return self._loop.idle and self._queue.idle and not self._retries and self.events.idle

    # -- what the API tells ------------------------------------------------------

    def listed(self, items: list[Json]) -> None:
        """The pods bound here, as just listed: every one (and every one gone since) reconciled."""
        before = set(self.pods)
        self.pods = {}
        for item in items:
            facts = pod_facts(item)
            if facts is not None and facts.node_name == self._node_name:
                self.pods[facts.key.uid] = item
                self._keys[facts.key.uid] = facts.key
        stray = []
        if not self._listed:
            self._listed = True
            for vm in self._provider.vms():
                self._keys.setdefault(vm.key.uid, vm.key)
                stray.append(vm.key.uid)
            self._provider.sweep()
        for uid in dict.fromkeys([*self.pods, *before, *stray]):
            self._queue.add(uid)

    def changed(self, event: WatchEvent) -> None:
        """One pod changed."""
        facts = pod_facts(event.object)
        if facts is None:
            return
        uid = facts.key.uid
        self._keys[uid] = facts.key
        if event.type == "DELETED" or facts.node_name != self._node_name:
            self.pods.pop(uid, None)
        else:
            self.pods[uid] = event.object
        self._queue.add(uid)

    # -- reconcile ------------------------------------------------------------------

    def _machine(self, key: PodKey, container: str) -> PodInputs:
        machine = self._machines.get(key.uid)
        if machine is None:
            def record(type: str, reason: str, message: str) -> None:
                self.events.record(key, container, type, reason, message)

            machine = self._machines[key.uid] = POD_MACHINE(PodCore(str(key), record))
        return machine

    def _reconcile(self, uid: str) -> "Deferred[None]":
        return Deferred.fromCoroutine(self._attempt(uid))

    async def _attempt(self, uid: str) -> None:
        key = self._keys.get(uid)
        if key is None:
            return
        try:
            await self._reconcile_pod(key)
        except PodGone:
            log.info("pod {pod} is gone: its VM goes too", pod=str(key))
            self.pods.pop(uid, None)
            self._queue.add(uid)
        except ApiError as error:
            backoff = self._backoffs.setdefault(uid, Backoff(self._random, initial=1.0, cap=30.0))
            delay = backoff.delay()
            log.warn("pod {pod}: {error}; again in {delay:.1f} s", pod=str(key), error=str(error), delay=delay)
            self._later(uid, delay)
            return
        self._backoffs.pop(uid, None)

    def _later(self, uid: str, delay: float) -> None:
        def fire() -> None:
            del self._retries[uid]
            self._queue.add(uid)

        if uid not in self._retries:
            self._retries[uid] = self._clock.callLater(delay, fire)

    def _now(self) -> str:
        return rfc3339(self._clock.seconds())

    async def _reconcile_pod(self, key: PodKey) -> None:
        pod = self.pods.get(key.uid)
        vm = self._provider.state(key)
        facts = pod_facts(pod) if pod is not None else None
        machine = self._machine(key, facts.container if facts is not None else "")
        if facts is None or facts.deleting:
            machine.delete(vm.hostname)
            if vm.phase is not VmPhase.GONE:
                await self._provider.delete(key, facts.grace if facts is not None else 0)
            if facts is not None:
                await self._writer.delete(key)
            machine.deleted()
            self._forget(key)
            return
        if facts.terminal:
            if vm.phase is not VmPhase.GONE:
                await self._provider.delete(key, 0)
            return
        if vm.phase is VmPhase.GONE:
            if facts.vm_hostname:
                await self._fail(machine, facts, "VmLost", f"VM {facts.vm_hostname} is gone", None)
            else:
                await self._create(machine, facts, pod)
        elif vm.phase is VmPhase.FAILED:
            await self._fail(machine, facts, vm.reason, vm.message, vm)
        else:
            machine.adopted(vm.hostname)
            await self._writer.write(facts, lambda facts: running(facts, vm, self._host_ip, self._now()))

    async def _fail(self, machine: PodInputs, facts: PodFacts, reason: str, message: str, vm: VmState | None) -> None:
        machine.failed(reason, message)
        await self._writer.write(facts, lambda facts: failed(facts, reason, message, self._host_ip, self._now(), vm))

    async def _create(self, machine: PodInputs, facts: PodFacts, pod: Any) -> None:
        try:
            spec = self._parse(pod)
            env = environment(spec, await self._secrets(spec))
        except PodRejected as rejected:
            await self._fail(machine, facts, rejected.reason, rejected.message, None)
            return
        facts = await self._writer.write(facts, lambda facts: creating(facts, self._host_ip, self._now()))
        machine.create()
        vm = await self._provider.create(spec, env)
        if vm.phase is VmPhase.FAILED:
            await self._fail(machine, facts, vm.reason, vm.message, None)
            return
        machine.made(vm.hostname)
        if vm.phase is VmPhase.GONE:
            vm = GONE
        await self._writer.write(facts, lambda facts: running(facts, vm, self._host_ip, self._now()))

    async def _secrets(self, spec: PodSpec) -> dict[str, dict[str, bytes] | None]:
        """The values of the Secrets ``spec`` names (``None``: no such Secret)."""
        found: dict[str, dict[str, bytes] | None] = {}
        for name in spec.secrets:
            try:
                found[name] = secret_values(await self._api.get_secret(spec.key.namespace, name))
            except NotFound:
                found[name] = None
            except Forbidden as error:
                raise PodRejected("SecretForbidden", f"Secret {name!r}: {error}") from None
        return found

    def _forget(self, key: PodKey) -> None:
        self._machines.pop(key.uid, None)
        self._keys.pop(key.uid, None)
        self._backoffs.pop(key.uid, None)
        self._writer.forget(key.uid)

    # -- for the kubelet API ------------------------------------------------------

    def hostname(self, namespace: str, name: str) -> str | None:
        """The hostname of the VM of pod ``namespace/name`` bound here, or ``None``."""
        for uid, pod in self.pods.items():
            key = self._keys.get(uid)
            if key is not None and key.namespace == namespace and key.name == name:
                return self._provider.hostname(key)
        return None

__all__ = ["PodController"]
