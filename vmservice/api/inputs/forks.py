# -*- test-case-name: tests.api.inputs.test_forks -*-
"""
The body of a fork request, into the domain's
:class:`~vmservice.nodes.warm_port.ForkRequest`: its count and tags checked.
"""

from __future__ import annotations

from twisted.web.iweb import IRequest

from ...errors import BadRequest
from ...nodes.warm_port import ForkRequest
from ...nodes.model import MAX_FORK_COUNT
from ..models.nodes import ForkNodeRequest
from .bodies import json_object, structure
from .tags import field_tags


def fork_request(request: IRequest) -> ForkRequest:
    """
    Parse the body of ``POST /vm/{hostname}/fork`` (empty: one child).

    :raise BadRequest: (``invalid_body``) not such a body, a bad tag;
        (``limit_exceeded``) a count outside 1 to :data:`MAX_FORK_COUNT`.
    """
    body = structure(json_object(request), ForkNodeRequest)
    count = 1 if body.count is None else body.count
    if not 1 <= count <= MAX_FORK_COUNT:
        raise BadRequest(f"field 'count' must be between 1 and {MAX_FORK_COUNT}", code="limit_exceeded")
    return ForkRequest(count=count, tags=field_tags("tags", body.tags or []), persistent=body.persistent)


__all__ = ["fork_request"]
