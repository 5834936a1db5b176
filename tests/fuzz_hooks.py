"""
The fuzzer's hooks (loaded by ``tests/fuzzing.py``): rules between values that
OpenAPI 3.1 cannot state, so that a request the document allows is one the
daemon takes.  Each rule is documented in docs/api.md where its route is, and
the parser refuses what it corrects (400) — the hooks only keep the fuzzer's
*valid* requests valid; its invalid ones are sent as generated.

- exec: ``background=true`` goes with neither ``stdin=true`` nor ``buffered=true``;
  a ``cwd`` must exist in the guest (relative ones under the user's home),
  and a background exec's command must (a streamed one reports it in its stream);
- forward names its upstream by the ``X-Inlets-Upstream`` header or the
  ``upstream`` parameter: one of them;
- cp upload with ``copy_semantics=cp-v1`` names ``source_name`` unless
  ``copy_contents=true``, which applies to a directory only; its
  ``source_type`` matches its mode (a file is sent binary, a directory as a
  tar); a tar upload's body is a tar; and its ``path`` must not be a
  directory for a file (the guest's file system decides);
- a create asks for no more CPUs, RAM, GPUs or PCI devices than its host
  group allows (``GET /hostgroup`` says what; the fuzzer's group: 1 vCPU);
- node listings take ``tag`` or ``tag_prefix``, not both;
- a tag change does not add and remove the same tag;
- an SSH key is a real public key (its base64 blob must decode to a key of
  the type it names, which no pattern can say).
"""

from __future__ import annotations

import io
import tarfile
from typing import Any

import schemathesis
from schemathesis.generation import GenerationMode

#: A public key of no one's (made for the fuzzer; its private half was thrown away).
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKScih3Rfs/k980fMnopNAx7nfCBF47Au5tedRHCv0Ef fuzz"


def _tar() -> bytes:
    """A tar of one small file: what a tar upload's body must be (the guest reads it; no schema can say so)."""
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        member = tarfile.TarInfo("fuzzed")
        member.size = 4
        archive.addfile(member, io.BytesIO(b"fuzz"))
    return stream.getvalue()


#: The body of every valid tar upload.
TAR = _tar()


def _true(value: Any) -> bool:
    return str(value).lower() in ("true", "1")


def _wire_mode(query: dict[str, Any], headers: dict[str, Any]) -> str:
    """How the guest reads an upload's body (as vmservice/api/inputs/copies.py decides it), but ``recursive``."""
    mode = str(query.get("mode") or "")
    mode = {"cp-v1-binary": "binary", "cp-v1-tar": "tar"}.get(mode, mode)
    if mode:
        return mode
    media = [value for name, value in headers.items() if name.lower() == "content-type"]
    return "tar" if media and all(str(m).split(";")[0].strip().lower() == "application/x-tar" for m in media) else "binary"


def _query(method: str, path: str, query: dict[str, Any], headers: dict[str, Any]) -> None:
    if (method, path) == ("POST", "/vm/{hostname}/exec"):
        query.pop("cwd", None)
        if _true(query.get("background")):
            query.pop("stdin", None)
            query.pop("buffered", None)
            query["cmd"] = "true"
    if (method, path) == ("GET", "/vm/{hostname}/forward") and not query.get("upstream"):
        if not any(name.lower() == "x-inlets-upstream" for name in headers):
            query["upstream"] = "127.0.0.1:8000"
    cp_v1 = query.get("copy_semantics") == "cp-v1" or str(query.get("mode", "")).startswith("cp-v1-")
    if (method, path) == ("POST", "/vm/{hostname}/cp") and cp_v1:
        if query.get("source_type") and query.get("mode") != "cp-v1-recursive":
            query["source_type"] = "directory" if _wire_mode(query, headers) == "tar" else "file"
        if _true(query.get("copy_contents")) and query.get("source_type") != "directory":
            query.pop("copy_contents")
        if not _true(query.get("copy_contents")) and not query.get("source_name"):
            query["source_name"] = "file"
    if (method, path) == ("POST", "/vm/{hostname}/cp"):
        directory = query.get("source_type") == "directory" or query.get("copy_semantics") == "cp-v1"
        query["path"] = "/tmp" if directory else "/tmp/fuzzed-upload"
    if path in ("/nodes", "/hostgroup/{name}/nodes") and method == "GET" and "tag" in query:
        query.pop("tag_prefix", None)


def _body(method: str, path: str, body: Any) -> None:
    if not isinstance(body, dict):
        return
    if (method, path) == ("PATCH", "/vm/{hostname}/tags"):
        added, removed = body.get("add"), body.get("remove")
        if isinstance(added, list) and isinstance(removed, list):
            body["remove"] = [tag for tag in removed if tag not in added]
    if isinstance(body.get("ssh_keys"), list):
        body["ssh_keys"] = [SSH_KEY for _ in body["ssh_keys"]]
    if (method, path) == ("POST", "/hostgroup/{name}/nodes"):
        for name in ("cpus", "ram_bytes", "gpu_count", "pci_devices"):
            body.pop(name, None)


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    """Keep a valid case valid where the rules above apply."""
    meta = getattr(case, "meta", None)
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return
    method, path = case.operation.method.upper(), case.operation.path
    if case.query is None:
        case.query = {}
    if isinstance(case.query, dict):
        _query(method, path, case.query, case.headers if isinstance(case.headers, dict) else {})
    _body(method, path, case.body)
    if (method, path) == ("POST", "/vm/{hostname}/cp") and isinstance(case.query, dict):
        headers = case.headers if isinstance(case.headers, dict) else {}
        recursive = case.query.get("mode") == "cp-v1-recursive" and case.query.get("source_type")
        if (case.query.get("source_type") == "directory") if recursive else _wire_mode(case.query, headers) == "tar":
            case.body = TAR
            case.media_type = "application/octet-stream"  # a case made without a body has none
