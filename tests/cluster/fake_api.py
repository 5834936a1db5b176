"""
A fake Kubernetes API server for the tests of :mod:`vmservice.cluster`: a
``twisted.web`` resource that keeps Nodes and Leases in memory with
resourceVersions (merge patches, optimistic updates, 404 and 409 as the API
answers them), checks the bearer token, answers what a test queues instead
(:meth:`FakeApi.queue`: a status, a malformed or huge body), and serves
pod lists and watch streams whose lines the test writes
(:meth:`FakeApi.send`).  :func:`fake_client` joins it to an
:class:`~vmservice.cluster.api_client.ApiClient` over treq's in-memory
transport.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from treq.testing import StubTreq
from twisted.internet.interfaces import IReactorTime
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from vmservice.cluster.api_client import ApiClient

SERVER = "https://127.0.0.1:6443"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` merged into ``target``."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def status(code: int, reason: str, message: str = "") -> bytes:
    """A ``Status`` body."""
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                       "message": message, "code": code}).encode()


class FakeApi(Resource):
    """The fake server; its objects by path, and everything asked of it in :attr:`requests`."""

    isLeaf = True

    def __init__(self, token: str = "token-1") -> None:
        super().__init__()
        self.tokens = {token}
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.requests: list[tuple[str, str, Any]] = []
        self.queued: list[tuple[Callable[[str, str], bool], int, bytes]] = []
        self.pods: list[dict[str, Any]] = []
        self.watchers: list[Request] = []

    def queue(self, method: str, fragment: str, code: int, body: bytes | None = None) -> None:
        """Answer the next ``method`` request whose path holds ``fragment`` with ``code`` and ``body``."""
        self.queued.append((lambda m, p: m == method and fragment in p, code,
                            status(code, "Queued", "as the test said") if body is None else body))

    def send(self, line: bytes) -> None:
        """Write ``line`` to every open watch."""
        for request in self.watchers:
            request.write(line)

    def end_watches(self) -> None:
        """End every open watch (as the server's timeout does)."""
        watchers, self.watchers = self.watchers, []
        for request in watchers:
            request.finish()

    def _next_version(self) -> str:
        self.version += 1
        return str(self.version)

    def render(self, request: Request) -> bytes | int:
        method = request.method.decode()
        path = request.path.decode()
        body = request.content.read() if request.content is not None else b""
        document = json.loads(body) if body else None
        self.requests.append((method, path, document))
        request.setHeader(b"Content-Type", b"application/json")
        if request.getHeader(b"Authorization") not in {f"Bearer {t}".encode() for t in self.tokens}:
            request.setResponseCode(401)
            return status(401, "Unauthorized")
        for index, (matches, code, answer) in enumerate(self.queued):
            if matches(method, path):
                del self.queued[index]
                request.setResponseCode(code)
                return answer
        if path == "/api/v1/pods":
            return self._pods(request)
        return self._objects(request, method, path, document)

    def _pods(self, request: Request) -> bytes | int:
        if request.args.get(b"watch") == [b"1"]:
            self.watchers.append(request)
            request.notifyFinish().addErrback(lambda _: None)
            request.write(b"")
            return NOT_DONE_YET
        return json.dumps({"kind": "PodList", "metadata": {"resourceVersion": str(self.version)},
                           "items": self.pods}).encode()

    def _objects(self, request: Request, method: str, path: str, document: Any) -> bytes:
        if method == "POST":
            name = document["metadata"]["name"]
            path = f"{path}/{name}"
            if path in self.objects:
                request.setResponseCode(409)
                return status(409, "AlreadyExists", f"{name} exists")
            document["metadata"].update(uid=f"uid-{name}", resourceVersion=self._next_version())
            self.objects[path] = document
            request.setResponseCode(201)
            return json.dumps(document).encode()
        subresource = path.endswith("/status")
        key = path[: -len("/status")] if subresource else path
        if key not in self.objects:
            request.setResponseCode(404)
            return status(404, "NotFound", f"{key} not found")
        current = self.objects[key]
        if method == "PATCH":
            patch = {"status": document.get("status")} if subresource else {k: v for k, v in document.items()
                                                                           if k != "status"}
            current = merge_patch(current, patch)
        elif method == "PUT":
            if document["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                request.setResponseCode(409)
                return status(409, "Conflict", "the object has been modified")
            current = document
        if method in ("PATCH", "PUT"):
            current["metadata"]["resourceVersion"] = self._next_version()
            self.objects[key] = current
        return json.dumps(current).encode()


def fake_client(clock: IReactorTime, api: FakeApi, token: Callable[[], str] = lambda: "token-1",
                max_body: int = 4 * 1024 * 1024) -> tuple[ApiClient, StubTreq]:
    """A client of ``api`` over treq's in-memory transport, and that transport (to flush streams)."""
    stub = StubTreq(api)
    return ApiClient(clock, stub, SERVER, token, max_body=max_body), stub


__all__ = ["FakeApi", "LEASES", "SERVER", "fake_client", "merge_patch", "status"]
