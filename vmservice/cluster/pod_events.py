# -*- test-case-name: tests.cluster.test_pod_parts -*-
"""
:class:`EventRecorder`: ``core/v1`` Events on the pods (``Created``,
``Started``, ``Killing``, ``Failed``, ``FailedCreate``), as ``kubectl
describe pod`` shows them.  Best-effort and bounded: an event is queued and
the call returns at once; at most :data:`MAX_PENDING` wait (more are
dropped and counted), one is posted at a time, a failed post is logged
(once until one goes through again) and not retried.  A reconcile never
waits for an event.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from .api_errors import excerpt
from .pod_object import PodKey
from .node_object import rfc3339

log = Logger(namespace="vmservice.cluster")

#: The most events waiting to be posted.
MAX_PENDING = 64


@frozen
class PodEvent:
    """One event: on which pod, ``Normal`` or ``Warning``, its reason and message."""

    key: PodKey
    container: str
    type: str
    reason: str
    message: str


class EventRecorder:
    """
    Posts events on pods, one at a time.

    :param post: posts an Event object in a namespace (:meth:`.pod_api.PodApi.post_event`).
    :param now: seconds since the epoch.
    :param node_name: the Node reporting (the events' source).
    """

    def __init__(self, post: Callable[[str, dict[str, Any]], "Deferred[Any]"], now: Callable[[], float],
                 node_name: str, limit: int = MAX_PENDING) -> None:
        self._post, self._now, self._node_name, self._limit = post, now, node_name, limit
        self._pending: deque[PodEvent] = deque()
        self._call: Deferred[Any] | None = None
        self._failing = False
        self._stopped = False
        #: Events dropped because too many were waiting.
        self.dropped = 0

    def record(self, key: PodKey, container: str, type: str, reason: str, message: str) -> None:
        """Queue an event on pod ``key`` (dropped when :data:`MAX_PENDING` wait, or once stopped)."""
        if self._stopped:
            return
        if len(self._pending) >= self._limit:
            self.dropped += 1
            return
        self._pending.append(PodEvent(key, container, type, reason, excerpt(message)))
        self._next()

    @property
    def idle(self) -> bool:
        """Whether nothing waits and nothing is being posted."""
        return self._call is None and not self._pending

    def stop(self) -> None:
        """Drop what waits and cancel the post under way."""
        self._stopped = True
        self._pending.clear()
        if self._call is not None:
            self._call.cancel()

    def _object(self, event: PodEvent) -> dict[str, Any]:
        now = rfc3339(self._now())
        involved = {"kind": "Pod", "apiVersion": "v1", "namespace": event.key.namespace, "name": event.key.name,
                    "uid": event.key.uid}
        if event.container:
            involved["fieldPath"] = f"spec.containers{{{event.container}}}"
        return {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{event.key.name[:200]}.", "namespace": event.key.namespace},
                "involvedObject": involved, "reason": event.reason, "message": event.message, "type": event.type,
                "source": {"component": "vmservice", "host": self._node_name}, "count": 1,
                "firstTimestamp": now, "lastTimestamp": now, "reportingComponent": "vmservice",
                "reportingInstance": self._node_name}

    def _next(self) -> None:
        if self._call is not None or not self._pending or self._stopped:
            return
        event = self._pending.popleft()
        call = self._call = self._post(event.key.namespace, self._object(event))

        def done(result: object) -> None:
            self._call = None
            if isinstance(result, Failure):
                if not self._failing and not self._stopped:
                    log.warn("an event on pod {pod} was not recorded ({why})", pod=str(event.key),
                             why=result.getErrorMessage())
                self._failing = True
            else:
                self._failing = False
            self._next()

        call.addBoth(done)


__all__ = ["EventRecorder", "MAX_PENDING", "PodEvent"]
