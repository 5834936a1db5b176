# -*- test-case-name: tests.cluster.test_node_controller -*-
"""
:class:`NodeController`: the daemon as a Node of the cluster (Virtual
Kubelet's NodeController, in Twisted).

At start it registers the Node: made when missing; when it exists (the
daemon restarted) its labels and status are brought up to date and nothing
is deleted, so the pods bound to it survive.  Then two loops run: the Lease
is renewed every ``renew_interval_seconds`` (a failure is logged and tried
again after a back-off, never more than an interval later), and the status
(conditions, capacity, addresses) is written every
``status_interval_seconds``.  At stop the loops end and the calls under way
are cancelled; the Node is *not* marked NotReady: a daemon that restarts
keeps its pods, and one that does not come back is found out by the control
plane once its Lease is older than the grace period (docs/cluster.md).
Where the node stands is :mod:`.node_phase`'s machine.
"""

from __future__ import annotations

from typing import Any, Callable, Coroutine

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..config import KubernetesConfig
from .api_client import Json
from .api_errors import ApiError, NotFound
from .backoff import Backoff
from .capacity import Capacity
from .cluster_metrics import ClusterMetrics
from .lease import LeaseKeeper
from .node_api import NodeApi
from .node_object import NodeInfo, node_annotations, node_manifest, node_status, stamp_conditions, taints, verdicts
from .node_phase import PHASE_MACHINE, PhaseCore

log = Logger(namespace="vmservice.cluster")


def reason(failure: Failure) -> str:
    """What went wrong, one line (an API error's own words; else the exception's type and text)."""
    if isinstance(failure.value, ApiError):
        return str(failure.value)
    return f"{type(failure.value).__name__}: {failure.getErrorMessage()}"[:300]


def missing_taints(node: Json, config: KubernetesConfig) -> list[Json]:
    """The configured taints the Node read lacks (the control plane's own, such as unreachable, do not count)."""
    spec = node.get("spec")
    present = spec.get("taints") if isinstance(spec, dict) else None
    have = {(t.get("key"), t.get("value", ""), t.get("effect")) for t in present or () if isinstance(t, dict)} \
        if isinstance(present, list) else set()
    return [t for t in taints(config) if (t["key"], t.get("value", ""), t["effect"]) not in have]


class NodeController:
    """
    One daemon's Node, Lease and status.

    :param clock: the loops' timers and the times written.
    :param api: the node's objects in the API.
    :param config: the ``kubernetes:`` section.
    :param capacity: what the Node advertises.
    :param memory_pressure: whether admission's budget is short (asked at each status).
    :param info: what the host is.
    :param metrics: what is counted for ``/metrics``.
    :param random: numbers in [0, 1) for the back-off's jitter.
    :param registered: called once the Node is registered (the pod controller starts then).
    """

    def __init__(self, clock: IReactorTime, api: NodeApi, config: KubernetesConfig, capacity: Capacity,
                 memory_pressure: Callable[[], bool], info: NodeInfo, metrics: ClusterMetrics,
                 random: Callable[[], float], registered: Callable[[], None] = lambda: None) -> None:
        self._clock, self._api, self._config, self._capacity = clock, api, config, capacity
        self._memory_pressure, self._info, self.metrics = memory_pressure, info, metrics
        self._lease = LeaseKeeper(clock, api, config)
        self._register_backoff = Backoff(random)
        self._lease_backoff = Backoff(random, cap=config.renew_interval_seconds)
        self._calls: dict[str, IDelayedCall] = {}
        self._under_way: set[Deferred[None]] = set()
        self._conditions: list[Any] = []
        self._status_failing = False
        self._stopped = False
        self._registered = registered
        self._phase = PHASE_MACHINE(PhaseCore(config.node_name, self._register, self._register_later,
                                              self._run_loops, self._halt))

    def start(self) -> None:
        """Register the Node, then keep its Lease and status."""
        self._phase.start()

    def stop(self) -> None:
        """End the loops and the calls under way (the Node and its Lease stay)."""
        self._phase.stop()

    @property
    def pending(self) -> int:
        """Timers and calls under way (none once stopped)."""
        return len(self._calls) + len(self._under_way)

    def _run(self, work: Coroutine[Any, Any, None], done: Callable[[], None], failed: Callable[[Failure], None]) -> None:
        """Run ``work``, then ``done`` or ``failed`` (not once stopped: a cancelled call is no failure)."""
        call = Deferred.fromCoroutine(work)
        self._under_way.add(call)

        def settled(result: object) -> None:
            self._under_way.discard(call)
            if self._stopped:
                return
            if isinstance(result, Failure):
                failed(result)
            else:
                done()

        call.addBoth(settled)

    def _later(self, name: str, delay: float, what: Callable[[], None]) -> None:
        """Call ``what`` in ``delay`` seconds, as the timer ``name``."""

        def fire() -> None:
            del self._calls[name]
            what()

        self._calls[name] = self._clock.callLater(delay, fire)

    def _status(self) -> Json:
        """The status now, its conditions' transition times kept from the last ones."""
        judged = verdicts(self._memory_pressure())
        self._conditions = stamp_conditions(self._clock.seconds(), judged, self._conditions)
        return node_status(self._config, self._capacity, self._info, self._conditions)

    async def _registration(self) -> None:
        try:
            node: Json | None = await self._api.get_node()
        except NotFound:
            node = None
        if node is None:
            node = await self._api.create_node(node_manifest(self._config, self._status()))
        else:
            old = node.get("status")
            conditions = old.get("conditions") if isinstance(old, dict) else None
            self._conditions = conditions if isinstance(conditions, list) else []
            if missing_taints(node, self._config):
                log.warn("cluster node {name}: the Node lacks configured taints; a node may not change its own "
                         "taints: add them with kubectl taint, or delete the Node", name=self._config.node_name)
            await self._api.patch_node({"metadata": {"labels": dict(self._config.labels),
                                                     "annotations": node_annotations(self._config)}})
            node = await self._api.patch_status(self._status())
        metadata = node.get("metadata")
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
        self._lease.node_uid = uid if isinstance(uid, str) else ""

    def _register(self) -> None:
        self._run(self._registration(), self._phase.registered, self._register_failed)

    def _register_failed(self, failure: Failure) -> None:
        self.metrics.failed("register")
        self._phase.register_failed(reason(failure))

    def _register_later(self) -> None:
        self._later("register", self._register_backoff.delay(), self._register)

    def _run_loops(self) -> None:
        self._registered()
        self._renew()
        self._later("status", self._config.status_interval_seconds, self._post_status)

    def _renew(self) -> None:
        self._run(self._lease.renew(), self._renewed, self._renew_failed)

    def _renewed(self) -> None:
        self.metrics.renewed(self._clock.seconds())
        self._lease_backoff.reset()
        self._phase.renewed()
        self._later("lease", self._config.renew_interval_seconds, self._renew)

    def _renew_failed(self, failure: Failure) -> None:
        self.metrics.failed("lease")
        self._phase.renew_failed(reason(failure))
        self._later("lease", self._lease_backoff.delay(), self._renew)

    async def _write_status(self) -> None:
        await self._api.patch_status(self._status())

    def _post_status(self) -> None:
        self._run(self._write_status(), self._status_written, self._status_failed)

    def _status_written(self) -> None:
        if self._status_failing:
            log.info("cluster node {name}: status written again", name=self._config.node_name)
        self._status_failing = False
        self._later("status", self._config.status_interval_seconds, self._post_status)

    def _status_failed(self, failure: Failure) -> None:
        self.metrics.failed("status")
        self._status_failing = True
        log.warn("cluster node {name}: status update failed ({reason}); trying again", name=self._config.node_name,
                 reason=reason(failure))
        self._later("status", self._config.status_interval_seconds, self._post_status)

    def _halt(self) -> None:
        self._stopped = True
        for call in self._calls.values():
            call.cancel()
        self._calls.clear()
        for under_way in list(self._under_way):
            under_way.cancel()
        self._under_way.clear()
        log.info("cluster node {name}: stopped (the Node and its Lease are left as they are)",
                 name=self._config.node_name)


__all__ = ["NodeController", "missing_taints", "reason"]
