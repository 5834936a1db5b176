# -*- test-case-name: tests.api.inputs.test_filesystem -*-
"""
The body of an fs mkdir.
"""

from __future__ import annotations

from twisted.web.iweb import IRequest

from ..models.files import FsMkdirRequest
from ..query import FILE_MODE, GUEST_PATH
from .bodies import json_object, structure


def fs_mkdir_request(request: IRequest) -> tuple[str, bool, int]:
    """
    Parse the JSON body of an fs mkdir: ``(path, recursive, mode)``; ``mode``
    defaults to 0755 when absent or empty.
    """
    body = structure(json_object(request, empty_ok=False), FsMkdirRequest)
    mode = 0o755 if not body.mode else FILE_MODE.parse("mode", body.mode)
    return GUEST_PATH.parse("path", body.path), bool(body.recursive), mode
