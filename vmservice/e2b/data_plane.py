# -*- test-case-name: tests.e2b.test_site -*-
"""
A sandbox's data plane (envd: every request carrying ``E2b-Sandbox-Id``),
as far as it is served yet: ``GET /health`` answers 204 for a running
sandbox and 502 for one that is paused or gone (the only status the SDKs
read as "not running"; with ``Should-Retry: false``, which they obey); every other request is answered as envd answers
what it does not serve: a Connect RPC call (``POST /<package.Service>/<Method>``)
with Connect's ``unimplemented`` error, anything else with a 404 in E2B's
error body.  Commands, files and watches over the guest are the next step.
"""

from __future__ import annotations

import json
import re

from twisted.web.iweb import IRequest
from twisted.web.server import NOT_DONE_YET

from ..errors import NotFound
from .control import answer
from .failures import error_body
from .sandbox import SandboxState
from .sandboxes import Sandboxes

#: A Connect RPC call's path.
RPC_PATH = re.compile(r"/[A-Za-z_][A-Za-z0-9_.]*\.[A-Za-z_][A-Za-z0-9_]*/[A-Za-z_][A-Za-z0-9_]*")


class DataPlane:
    """The sandboxes' data plane (:param sandboxes: the sandboxes)."""

    def __init__(self, sandboxes: Sandboxes) -> None:
        self.sandboxes = sandboxes

    def _running(self, sandbox_id: str) -> bool:
        try:
            return self.sandboxes.get(sandbox_id).state is SandboxState.RUNNING
        except NotFound:
            return False

    def render(self, request: IRequest) -> int:
        """Answer ``request`` of the sandbox its ``E2b-Sandbox-Id`` names."""
        sandbox_id = (request.getHeader(b"e2b-sandbox-id") or b"").decode("latin-1")
        path = (request.path or b"").decode("latin-1")
        if path == "/health" and request.method in (b"GET", b"HEAD"):
            if self._running(sandbox_id):
                answer(request, 204, None)
            else:
                # Said once: the SDKs retry a 502 without it.
                answer(request, 502, json.dumps({"sandboxId": sandbox_id[:64], "code": 502,
                                                 "message": "The sandbox is not running"}).encode(),
                       {b"Should-Retry": b"false"})
        elif request.method == b"POST" and RPC_PATH.fullmatch(path):
            answer(request, 404, json.dumps({"code": "unimplemented",
                                             "message": f"{path[1:]} is not served by this daemon yet"}).encode())
        else:
            answer(request, 404, error_body(404, f"{path[:200]} is not served by this daemon yet"))
        return NOT_DONE_YET


__all__ = ["DataPlane", "RPC_PATH"]
