# -*- test-case-name: tests.nodes.test_background_limit -*-
"""
The bound on a node's background execs: at most ``most`` live ones (running,
or ended and not deleted yet) per node; a start beyond it is refused with 409
``background_limit_reached`` before anything is sent to start it.

Each side keeps a bound of its own.  The daemon's is the API's promise, and
holds whatever the client does: the starts of one node go one at a time, and
each first asks the guest for its list (:meth:`IBackgroundExecs.listing`)
and counts it, so two starts at once cannot both take the last place.  The
guest keeps its own registry bound (``MAX_EXECS`` in
:mod:`vmservice.guest.background`, 256, answered as 409 ``busy``), which
protects the guest's agent from whoever reaches it; the configured bound is
at most that.  A guest is untrusted and may lie in its list: fewer execs than
it keeps gets it more of them, which only costs its own memory (the daemon
holds nothing per background exec), and a longer list is a reply like any
other, capped per call and counted in the daemon's buffer budget.
"""

from __future__ import annotations

from twisted.internet.defer import DeferredLock

from ..config import DEFAULT_BACKGROUND_EXECS_PER_NODE
from ..errors import Conflict
from ..guestport.background import BackgroundInfo, BackgroundRequest, IBackgroundExecs


class BackgroundLimit:
    """
    Starts background execs within the bound, one node's starts at a time.

    :param most: live background execs a node may keep.
    """

    def __init__(self, most: int = DEFAULT_BACKGROUND_EXECS_PER_NODE) -> None:
        self.most = most
        self._locks: dict[str, DeferredLock] = {}

    async def start(self, hostname: str, execs: IBackgroundExecs, request: BackgroundRequest) -> BackgroundInfo:
        """
        Start ``request`` in ``hostname``'s guest (whose execs are ``execs``)
        unless the node keeps :attr:`most` already.

        :raises Conflict: ``background_limit_reached``.
        """
        lock = self._locks.setdefault(hostname, DeferredLock())
        await lock.acquire()
        try:
            live = len(await execs.listing())
            if live >= self.most:
                raise Conflict(
                    f"node {hostname} keeps {live} background execs, the most it may "
                    f"(limits.background_execs_per_node: {self.most}): delete ended ones first "
                    f"(DELETE /vm/{hostname}/exec/{{exec_id}}), or kill and delete running ones",
                    code="background_limit_reached",
                )
            return await execs.start(request)
        finally:
            lock.release()
            if not lock.locked and self._locks.get(hostname) is lock:
                del self._locks[hostname]


__all__ = ["BackgroundLimit"]
