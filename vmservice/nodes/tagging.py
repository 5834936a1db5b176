# -*- test-case-name: tests.nodes.test_tagging -*-
"""
A node's tags after it was created: read them, change them.

Tags are part of the node's record (:class:`~.model.NodeRecord`), so a change
is a new record: written atomically (:mod:`vmservice.durable`) before it is
taken in memory (:meth:`.runtime.NodeRuntime.retag`), seen at once by the
listings' tag filters, and kept across daemon restarts, a ``kill -9`` right
after the answer included.

A change does not wait for, nor refuse because of, a lifecycle operation
under way: tags touch neither the VM nor the status, and every operation
writes the record as it is in memory, tags included.  Only a node being
removed (its record no longer written) refuses it.

How an edit works (:func:`edited`): ``replace`` sets the tags; otherwise
``remove`` drops the tags it names and ``add`` appends those not there yet,
in the order given.  The result never holds a tag twice (the first place is
kept) and has at most :data:`~.model.MAX_TAGS` tags.
"""

from __future__ import annotations

from attrs import frozen

from ..errors import BadRequest
from .model import MAX_TAGS, unique
from .registry import Registry


@frozen
class TagEdit:
    """
    A change of a node's tags; each tag is valid (the API checked them with
    :func:`~.model.tag_problem`).

    :ivar add: tags to append unless the node has them.
    :ivar remove: tags to drop (those it does not have are no matter).
    :ivar replace: the node's tags from now on, or ``None`` to keep them and
        apply ``remove`` and ``add``.
    """

    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    replace: tuple[str, ...] | None = None


def edited(tags: tuple[str, ...], edit: TagEdit) -> tuple[str, ...]:
    """
    The tags ``tags`` become by ``edit`` (pure).

    :raise BadRequest: (``too_many_tags``) the result would have more than
        :data:`~.model.MAX_TAGS` tags.
    """
    if edit.replace is not None:
        result = unique(edit.replace)
    else:
        dropped = set(edit.remove)
        result = unique([*(tag for tag in tags if tag not in dropped), *edit.add])
    if len(result) > MAX_TAGS:
        raise BadRequest(f"a node has at most {MAX_TAGS} tags; this change would give it {len(result)}",
                         code="too_many_tags")
    return result


class Tagging:
    """
    The tags of the nodes of one daemon.

    :param registry: the nodes.
    """

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def tags(self, hostname: str) -> tuple[str, ...]:
        """
        The tags of node ``hostname``.

        :raise NotFound: no such node.
        """
        return self._registry.find(hostname).record.tags

    def edit(self, hostname: str, edit: TagEdit) -> tuple[str, ...]:
        """
        Change the tags of node ``hostname``; an edit that changes nothing
        writes nothing.

        :return: its tags from now on.
        :raise NotFound: no such node.
        :raise BadRequest: (``too_many_tags``) too many tags.
        :raise Conflict: (``busy``) the node is being removed.
        """
        node = self._registry.find(hostname)
        tags = edited(node.record.tags, edit)
        if tags != node.record.tags:
            node.retag(tags)
        return tags


__all__ = ["TagEdit", "Tagging", "edited"]
