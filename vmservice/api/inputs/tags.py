# -*- test-case-name: tests.api.test_tags -*-
"""
Tags in a body: a list of them checked, and the body of a tag change.
"""

from __future__ import annotations

from twisted.web.iweb import IRequest

from ...errors import BadRequest
from ...nodes.model import MAX_TAGS, tag_problem, unique
from ...nodes.tagging import TagEdit
from ..models.nodes import TagsUpdate
from .bodies import json_object, structure


def field_tags(name: str, tags: list[str]) -> tuple[str, ...]:
    """
    The tags of field ``name``, each once, in their order.

    :raise BadRequest: (``invalid_body``) more than MAX_TAGS, or a tag that
        is not one (:func:`~vmservice.nodes.model.tag_problem`).
    """
    if len(tags) > MAX_TAGS:
        raise BadRequest(f"field {name!r}: at most {MAX_TAGS} tags", code="invalid_body")
    for index, tag in enumerate(tags):
        problem = tag_problem(tag)
        if problem is not None:
            raise BadRequest(f"field '{name}[{index}]': {problem}", code="invalid_body")
    return unique(tags)


def tag_edit(request: IRequest) -> TagEdit:
    """
    Parse the body of a tag change: ``{"replace": [...]}``, or ``{"add": [...]}``
    and/or ``{"remove": [...]}``.

    :raise BadRequest: (``invalid_body``) none of them, ``replace`` with
        another, a tag both added and removed, or a bad tag.
    """
    body = structure(json_object(request, empty_ok=False), TagsUpdate)
    if body.add is None and body.remove is None and body.replace is None:
        raise BadRequest("one of 'add', 'remove' or 'replace' is required", code="invalid_body")
    if body.replace is not None:
        if body.add is not None or body.remove is not None:
            raise BadRequest("'replace' cannot be combined with 'add' or 'remove'", code="invalid_body")
        return TagEdit(replace=field_tags("replace", body.replace))
    add, remove = field_tags("add", body.add or []), field_tags("remove", body.remove or [])
    both = [tag for tag in add if tag in remove]
    if both:
        raise BadRequest(f"tag {both[0]!r} is both added and removed", code="invalid_body")
    return TagEdit(add=add, remove=remove)
