# -*- test-case-name: tests.cluster.test_pod_controller -*-
"""
:class:`StatusWriter`: a pod's status written as a merge patch of its
``status``, only when it says something new (times aside); a 409 reads the
pod again and writes the status made from what was read (at most
:data:`ATTEMPTS` times); a 404 says the pod is gone.  Also the pod's final
DELETE (grace 0, on the pod's uid only).
"""

from __future__ import annotations

from typing import Callable

from twisted.logger import Logger

from .api_client import Json
from .api_errors import Conflict, NotFound
from .pod_api import PodApi
from .pod_object import PodFacts, PodKey, pod_facts
from .pod_status import essence

log = Logger(namespace="vmservice.cluster")

#: Writes of one status tried at most (each after a 409 read the pod again).
ATTEMPTS = 3


class PodGone(Exception):
    """The pod is not there any more (404), or another pod of the same name replaced it."""


class StatusWriter:
    """
    Writes the pods' statuses.

    :param api: the pods in the API.
    """

    def __init__(self, api: PodApi) -> None:
        self._api = api
        self._written: dict[str, Json] = {}

    def forget(self, uid: str) -> None:
        """The pod is gone: what was written of it is forgotten."""
        self._written.pop(uid, None)

    async def write(self, facts: PodFacts, make: Callable[[PodFacts], Json]) -> PodFacts:
        """
        Write the status ``make`` makes of ``facts`` unless it was the last
        written; the facts it was written from (read again after a 409).

        :raise PodGone: the pod is gone (its VM is to go too).
        :raise ApiError: another failure (the caller tries again later).
        """
        key = facts.key
        for attempt in range(1, ATTEMPTS + 1):
            status = make(facts)
            if self._written.get(key.uid) == essence(status):
                return facts
            try:
                await self._api.patch_status(key, status)
            except NotFound:
                self.forget(key.uid)
                raise PodGone(str(key)) from None
            except Conflict:
                if attempt == ATTEMPTS:
                    raise
                facts = await self._read(key)
                continue
            self._written[key.uid] = essence(status)
            return facts
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, key: PodKey) -> PodFacts:
        try:
            pod = await self._api.get_pod(key)
        except NotFound:
            raise PodGone(str(key)) from None
        facts = pod_facts(pod)
        if facts is None or facts.key != key:
            raise PodGone(str(key))
        return facts

    async def delete(self, key: PodKey) -> None:
        """Delete the pod at once, if it is still ``key.uid``'s (gone or replaced: nothing to do)."""
        try:
            await self._api.delete_pod(key)
        except NotFound:
            pass
        except Conflict:
            log.info("pod {pod}: another pod of that name replaced it; left alone", pod=str(key))
        self.forget(key.uid)


__all__ = ["ATTEMPTS", "PodGone", "StatusWriter"]
