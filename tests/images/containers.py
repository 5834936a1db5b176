"""
Small container images made by the tests themselves (no registry is reachable): layer tar files, OCI image
layouts and ``docker save`` tar files, as the tools users have write them.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from typing import Sequence

from attrs import frozen

__all__ = ["Entry", "docker_save", "layer", "oci_layout"]


@frozen
class Entry:
    """
    One member of a layer.

    :ivar name: the member's path (``etc/greeting``).
    :ivar kind: ``file``, ``dir``, ``symlink``, ``hardlink`` or ``fifo``.
    :ivar data: a file's content.
    :ivar target: a link's target.
    :ivar mode: the permission bits.
    """

    name: str
    kind: str = "file"
    data: bytes = b""
    target: str = ""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0


def layer(entries: Sequence[Entry], compress: bool = False) -> bytes:
    """A layer tar file holding ``entries`` in order, gzip-compressed if ``compress``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.mode = entry.mode
            info.uid, info.gid = entry.uid, entry.gid
            info.mtime = 1_700_000_000
            content = None
            if entry.kind == "file":
                info.size = len(entry.data)
                content = io.BytesIO(entry.data)
            elif entry.kind == "dir":
                info.type = tarfile.DIRTYPE
            elif entry.kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, entry.target
            elif entry.kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, entry.target
            elif entry.kind == "fifo":
                info.type = tarfile.FIFOTYPE
            else:
                raise ValueError(entry.kind)
            tar.addfile(info, content)
    data = buffer.getvalue()
    return gzip.compress(data, mtime=0) if compress else data


def _blob(directory: str, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(directory, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(directory, "blobs", "sha256", digest), "wb") as stream:
        stream.write(data)
    return f"sha256:{digest}"


def _config(platform: tuple[str, str], layers: Sequence[bytes]) -> bytes:
    diff_ids = ["sha256:" + hashlib.sha256(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).hexdigest()
                for data in layers]
    return json.dumps({
        "architecture": platform[1], "os": platform[0], "created": "2026-01-02T03:04:05Z",
        "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }).encode()


def _manifest(directory: str, platform: tuple[str, str], layers: Sequence[bytes]) -> tuple[str, int]:
    config = _blob(directory, _config(platform, layers))
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config,
                   "size": len(_config(platform, layers))},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if data[:2] == b"\x1f\x8b" else ""),
                    "digest": _blob(directory, data), "size": len(data)} for data in layers],
    }).encode()
    return _blob(directory, manifest), len(manifest)


def oci_layout(directory: str, layers: Sequence[bytes], ref: str = "latest", nested: bool = False,
               others: Sequence[tuple[str, str]] = ()) -> str:
    """
    Write an OCI image layout of one ``linux/amd64`` image made of ``layers`` into ``directory``.

    :param nested: put the image in a multi-platform index (with an image per platform of ``others``, of
        the same layers) that ``index.json`` names, as a multi-platform image pulled whole is stored.
    :return: the digest of the ``linux/amd64`` manifest.
    """
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "oci-layout"), "w") as stream:
        json.dump({"imageLayoutVersion": "1.0.0"}, stream)
    digest, size = _manifest(directory, ("linux", "amd64"), layers)
    descriptors = [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": size,
                    "platform": {"architecture": "amd64", "os": "linux"}}]
    for platform in others:
        other, other_size = _manifest(directory, platform, layers)
        descriptors.insert(0, {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": other,
                               "size": other_size, "platform": {"architecture": platform[1], "os": platform[0]}})
    annotations = {"org.opencontainers.image.ref.name": ref}
    if nested:
        inner = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": descriptors}).encode()
        top = [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": _blob(directory, inner),
                "size": len(inner), "annotations": annotations}]
    else:
        top = [dict(descriptor, annotations=annotations) for descriptor in descriptors]
    with open(os.path.join(directory, "index.json"), "w") as stream:
        json.dump({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": top},
                  stream)
    return digest


def docker_save(path: str, layers: Sequence[bytes], tag: str = "example/app:1",
                platform: tuple[str, str] = ("linux", "amd64")) -> None:
    """Write a ``docker save`` tar file of the classic form: ``manifest.json``, ``<id>/layer.tar``."""
    members: list[tuple[str, bytes]] = []
    names = []
    for data in layers:
        name = f"{hashlib.sha256(data).hexdigest()}/layer.tar"
        names.append(name)
        members.append((name, data))
    config = _config(platform, layers)
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    members.append((config_name, config))
    members.append(("manifest.json", json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": names}]).encode()))
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
