# -*- test-case-name: tests.nodes.test_recovery -*-
"""
What to do with each node at start-up, after a clean stop or a crash.

Every operation writes the node's record *before* it acts (``Creating``,
``Suspending``, ``Deleting``, ...), so the record plus what is found on the
host (is its VM still running, in which state; is there a complete snapshot)
says how far the operation got.  :func:`decide` turns those facts into one
:class:`Recovery`; the fleet carries it out.  Pure, so every row is a unit
test.
"""

from __future__ import annotations

from attrs import frozen

from .model import NodeRecord, Status


@frozen
class Recovery:
    """
    The decision for one node.

    :ivar status: the node's status from now on; ``None`` removes the node
        (VM killed, disk, snapshot and record deleted).
    :ivar adopt: keep its running VM (otherwise any VM of it is killed).
    :ivar resume: the VM is paused by an unfinished suspend: let it run again.
    """

    status: Status | None
    adopt: bool = False
    resume: bool = False


def _dead(record: NodeRecord) -> Recovery:
    """The VM is gone: a persistent node is kept stopped, an ephemeral one removed."""
    return Recovery(Status.STOPPED if record.persistent else None)


def decide(record: NodeRecord, vm_state: str | None, snapshot: bool) -> Recovery:
    """
    Decide what becomes of ``record``.

    :param vm_state: the hypervisor's run state of the node's VM if it still
        runs and was verified to be that node's (``running``, ``paused``,
        ``postmigrate``, ``io-error``: stopped for lack of room for its
        disk's writes, ...), ``None`` when there is none.
    :param snapshot: whether a complete snapshot file exists.
    """
    status = record.status
    if status in (Status.CREATING, Status.DELETING):
        return Recovery(None)
    if status is Status.SUSPENDING:
        if snapshot:
            return Recovery(Status.SUSPENDED)
        if vm_state in ("running", "paused", "postmigrate", "finish-migrate", "io-error"):
            return Recovery(Status.RUNNING, adopt=True, resume=True)
        return _dead(record)
    if status in (Status.RESTORING, Status.SUSPENDED):
        return Recovery(Status.SUSPENDED) if snapshot else _dead(record)
    if status is Status.STOPPED:
        return Recovery(Status.STOPPED)
    if record.forking and vm_state in ("running", "paused", "postmigrate", "finish-migrate", "io-error"):
        # Frozen for a fork (paused, its state saved or being saved): it runs on; the children go (Creating).
        return Recovery(Status.RUNNING, adopt=True, resume=True)
    if vm_state == "io-error":
        # Stopped on a write the state directory had no room for: kept as it was, it runs on once there is room.
        return Recovery(Status.PAUSED if status is Status.PAUSED else Status.RUNNING, adopt=True)
    if vm_state == "running":
        return Recovery(Status.RUNNING, adopt=True)
    if vm_state == "paused":
        return Recovery(Status.PAUSED, adopt=True)
    return _dead(record)


__all__ = ["Recovery", "decide"]
