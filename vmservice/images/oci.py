# -*- test-case-name: tests.images.test_oci -*-
"""
Reading container images as users have them, and unpacking their layers into a root tree.

Two forms are read, both without any registry:

- an OCI image layout: a directory holding ``oci-layout``, ``index.json`` and ``blobs/sha256/<hex>``
  (what ``skopeo copy ... oci:DIR``, ``buildah push ... oci:DIR`` or ``docker buildx --output type=oci``
  write), or the same packed in a tar file;
- a ``docker save`` tar file: ``manifest.json`` naming each image's config and layer files (older Docker
  writes ``<id>/layer.tar``; Docker 25 and later write an OCI layout inside the tar file as well, and that
  is what is read then).

:func:`open_source` finds the image: in an index, manifests for other platforms are skipped and nested
indexes are followed, so a multi-platform image gives its ``linux/amd64`` manifest; a ``ref`` picks among
several images by their ``org.opencontainers.image.ref.name`` annotation (OCI) or repository tag (docker).
Every blob read from an OCI layout is checked against its digest.

:func:`apply_layer` applies one layer as a container runtime would: entries replace what the lower layers
left at their path; ``.wh.NAME`` deletes ``NAME`` of the lower layers and ``.wh..wh..opq`` empties its
directory of them.  A whiteout must name one entry of its own directory: ``.wh.``, ``.wh..`` and ``.wh...``
(nothing, the directory itself, its parent) are refused, as is a separator in the name. Layers may be uncompressed, gzip (also bzip2 and xz) or zstd (with the ``zstd``
program). Paths are confined to the tree: a member whose name climbs out of it (``..``) is refused, and
symbolic links met on the way to a member, absolute ones included, are resolved inside the tree, never on
the host. Absolute symbolic links are kept as they are: they are right once the tree is the guest's root.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from contextlib import contextmanager
from typing import IO, Iterator, Sequence

from attrs import frozen

__all__ = [
    "OCI_PLATFORM",
    "ContainerImage",
    "ImageSource",
    "OciError",
    "apply_layer",
    "open_source",
    "resolve_inside",
]

#: The platform picked from a multi-platform image: what our guests run.
OCI_PLATFORM = ("linux", "amd64")

_INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
                "application/vnd.docker.distribution.manifest.list.v2+json")
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SYMLINK_HOPS = 40


class OciError(Exception):
    """
    The file is not a container image we can read, has no ``linux/amd64`` image, or a layer is unsafe or
    damaged; the message says which.
    """


@frozen
class ContainerImage:
    """
    The image picked from a source.

    :ivar digest: ``sha256:<hex>`` of its manifest (OCI), or of its config (docker ``manifest.json``, which
        has no manifest blob).
    :ivar config: the parsed image configuration (``architecture``, ``os``, ``config.Env``, ``created``...).
    :ivar layers: the layer files in the source, lowest first, as :meth:`ImageSource.open` takes them.
    :ivar ref: the reference it was picked by or known as (a tag or ref name), or empty.
    """

    digest: str
    config: dict[str, object]
    layers: tuple[str, ...]
    ref: str


class ImageSource:
    """
    An OCI layout directory or a tar file, read by paths relative to its top (``index.json``,
    ``blobs/sha256/<hex>``, ``<id>/layer.tar``).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._tar: tarfile.TarFile | None = None
        self._members: dict[str, tarfile.TarInfo] = {}
        if os.path.isdir(path):
            return
        try:
            self._tar = tarfile.open(path, "r:*")
        except (OSError, tarfile.TarError) as error:
            raise OciError(f"{path} is neither an OCI layout directory nor a tar file: {error}") from None
        for member in self._tar.getmembers():
            self._members[_normal_name(member.name)] = member

    def close(self) -> None:
        """Close the tar file, if any."""
        if self._tar is not None:
            self._tar.close()

    def exists(self, relative: str) -> bool:
        """Whether ``relative`` is a file of the source."""
        if self._tar is None:
            return os.path.isfile(self._local(relative))
        return self._member(relative) is not None

    def _local(self, relative: str) -> str:
        parts = _normal_name(relative).split("/")
        if ".." in parts or not relative:
            raise OciError(f"{self.path}: refusing the path {relative!r}")
        return os.path.join(self.path, *parts)

    def _member(self, relative: str) -> tarfile.TarInfo | None:
        member = self._members.get(_normal_name(relative))
        for _ in range(_SYMLINK_HOPS):
            if member is None or not (member.issym() or member.islnk()):
                return member
            target = member.linkname if member.islnk() else os.path.normpath(
                os.path.join(os.path.dirname(_normal_name(member.name)), member.linkname))
            member = self._members.get(_normal_name(target))
        return None

    @contextmanager
    def open(self, relative: str) -> Iterator[IO[bytes]]:
        """The content of file ``relative``, as a seekable binary stream."""
        if self._tar is None:
            try:
                stream: IO[bytes] = open(self._local(relative), "rb")
            except OSError as error:
                raise OciError(f"{self.path}: cannot read {relative}: {error.strerror}") from None
        else:
            member = self._member(relative)
            extracted = self._tar.extractfile(member) if member is not None and member.isfile() else None
            if extracted is None:
                raise OciError(f"{self.path}: {relative} is missing")
            stream = extracted
        with stream:
            yield stream

    def read_json(self, relative: str, digest: str | None = None) -> object:
        """Parse file ``relative`` as JSON, after checking it against ``digest`` when given."""
        with self.open(relative) as stream:
            data = stream.read()
        if digest is not None:
            _check_digest(data, digest, relative)
        try:
            return json.loads(data)
        except ValueError as error:
            raise OciError(f"{self.path}: {relative} is not JSON: {error}") from None

    def verify(self, relative: str, digest: str) -> None:
        """Check file ``relative`` against ``digest`` (``sha256:<hex>``) by reading it through."""
        hasher = hashlib.sha256()
        with self.open(relative) as stream:
            for chunk in iter(lambda: stream.read(1024 * 1024), b""):
                hasher.update(chunk)
        if f"sha256:{hasher.hexdigest()}" != digest:
            raise OciError(f"{self.path}: {relative} does not match its digest {digest}")


def _normal_name(name: str) -> str:
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    return "/".join(parts)


def _check_digest(data: bytes, digest: str, what: str) -> None:
    if f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
        raise OciError(f"{what} does not match its digest {digest}")


def _blob_path(digest: object) -> str:
    if not isinstance(digest, str) or ":" not in digest:
        raise OciError(f"bad digest {digest!r}")
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64 or any(c not in "0123456789abcdef" for c in hexdigest):
        raise OciError(f"unsupported digest {digest!r} (sha256 only)")
    return f"blobs/sha256/{hexdigest}"


def _mapping(value: object, what: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise OciError(f"{what} is not a JSON object")
    return value


def _list(value: object, what: str) -> list[object]:
    if not isinstance(value, list):
        raise OciError(f"{what} is not a JSON list")
    return value


def _platform_of(config: dict[str, object]) -> tuple[str, str]:
    return (str(config.get("os", "")), str(config.get("architecture", "")))


def _describe(platform: tuple[str, str]) -> str:
    return "/".join(part or "?" for part in platform)


def _oci_candidates(source: ImageSource, index: dict[str, object], depth: int = 0
                    ) -> list[tuple[dict[str, object], str]]:
    """The image manifest descriptors of an index, nested indexes flattened, with their ref names."""
    if depth > 4:
        raise OciError(f"{source.path}: indexes nested too deep")
    found: list[tuple[dict[str, object], str]] = []
    for entry in _list(index.get("manifests", []), "index manifests"):
        descriptor = _mapping(entry, "a manifest descriptor")
        annotations = descriptor.get("annotations")
        ref = ""
        if isinstance(annotations, dict):
            ref = str(annotations.get("org.opencontainers.image.ref.name")
                      or annotations.get("io.containerd.image.name") or "")
        platform = descriptor.get("platform")
        if isinstance(platform, dict) and (str(platform.get("os", "")), str(platform.get("architecture", ""))) \
                != OCI_PLATFORM:
            continue
        if descriptor.get("mediaType") in _INDEX_TYPES:
            nested = _mapping(source.read_json(_blob_path(descriptor.get("digest")), str(descriptor.get("digest"))),
                              "a nested index")
            found.extend((inner, inner_ref or ref) for inner, inner_ref in _oci_candidates(source, nested, depth + 1))
        else:
            found.append((descriptor, ref))
    return found


def _matches(ref: str, wanted: str) -> bool:
    return bool(wanted) and (ref == wanted or ref.endswith(f":{wanted}") or ref.rsplit(":", 1)[0] == wanted)


def _open_oci(source: ImageSource, wanted_ref: str) -> ContainerImage:
    index = _mapping(source.read_json("index.json"), "index.json")
    candidates = _oci_candidates(source, index)
    if wanted_ref:
        candidates = [(descriptor, ref) for descriptor, ref in candidates if _matches(ref, wanted_ref)]
    images = []
    seen_platforms = []
    for descriptor, ref in candidates:
        digest = str(descriptor.get("digest"))
        manifest = _mapping(source.read_json(_blob_path(digest), digest), f"manifest {digest}")
        config_descriptor = _mapping(manifest.get("config"), f"config of manifest {digest}")
        config_digest = str(config_descriptor.get("digest"))
        config = _mapping(source.read_json(_blob_path(config_digest), config_digest), f"config {config_digest}")
        platform = _platform_of(config)
        seen_platforms.append(platform)
        if platform != OCI_PLATFORM:
            continue
        layers = []
        for layer in _list(manifest.get("layers", []), f"layers of manifest {digest}"):
            layer_digest = str(_mapping(layer, "a layer descriptor").get("digest"))
            path = _blob_path(layer_digest)
            source.verify(path, layer_digest)
            layers.append(path)
        images.append(ContainerImage(digest, config, tuple(layers), ref or wanted_ref))
    return _pick(source, images, wanted_ref, seen_platforms)


def _open_docker(source: ImageSource, wanted_ref: str) -> ContainerImage:
    entries = _list(source.read_json("manifest.json"), "manifest.json")
    images = []
    seen_platforms = []
    for item in entries:
        entry = _mapping(item, "a manifest.json entry")
        tags = [str(tag) for tag in _list(entry.get("RepoTags") or [], "RepoTags")]
        if wanted_ref and not any(_matches(tag, wanted_ref) for tag in tags):
            continue
        config_path = str(entry.get("Config"))
        with source.open(config_path) as stream:
            config_bytes = stream.read()
        try:
            config = _mapping(json.loads(config_bytes), config_path)
        except ValueError as error:
            raise OciError(f"{source.path}: {config_path} is not JSON: {error}") from None
        platform = _platform_of(config)
        seen_platforms.append(platform)
        if platform != OCI_PLATFORM:
            continue
        layers = tuple(str(layer) for layer in _list(entry.get("Layers", []), "Layers"))
        for layer in layers:
            if not source.exists(layer):
                raise OciError(f"{source.path}: layer {layer} is missing")
        digest = f"sha256:{hashlib.sha256(config_bytes).hexdigest()}"
        images.append(ContainerImage(digest, config, layers, wanted_ref or (tags[0] if tags else "")))
    return _pick(source, images, wanted_ref, seen_platforms)


def _pick(source: ImageSource, images: list[ContainerImage], wanted_ref: str,
          seen_platforms: Sequence[tuple[str, str]]) -> ContainerImage:
    if not images:
        if wanted_ref and not seen_platforms:
            raise OciError(f"{source.path}: no image named {wanted_ref!r}")
        seen = ", ".join(sorted({_describe(platform) for platform in seen_platforms})) or "none"
        raise OciError(f"{source.path}: no {_describe(OCI_PLATFORM)} image (platforms found: {seen})")
    if len({image.digest for image in images}) > 1:
        refs = ", ".join(image.ref or image.digest for image in images)
        raise OciError(f"{source.path}: holds several {_describe(OCI_PLATFORM)} images ({refs}); name one")
    return images[0]


def open_source(path: str, ref: str = "") -> tuple[ImageSource, ContainerImage]:
    """
    Open ``path`` (an OCI layout directory, or a tar file of one or of ``docker save``) and pick its
    ``linux/amd64`` image; close the source when done with it.

    :param ref: a ref name or tag choosing among several images; empty when there is one.
    :raises OciError: if the image cannot be read or picked.
    """
    source = ImageSource(path)
    try:
        if source.exists("index.json"):
            image = _open_oci(source, ref)
        elif source.exists("manifest.json"):
            image = _open_docker(source, ref)
        else:
            raise OciError(f"{path}: has neither index.json (OCI layout) nor manifest.json (docker save)")
    except BaseException:
        source.close()
        raise
    return source, image


# -- applying layers ---------------------------------------------------------------------------------


def resolve_inside(root: str, relative: str, follow_last: bool = True) -> str:
    """
    The host path of ``relative`` in the tree ``root``, every symbolic link on the way resolved as it
    would be with ``root`` as ``/``: absolute targets start again at ``root``, and ``..`` stops at it.
    The result is always inside ``root``.

    :param follow_last: resolve the last component too when it is a symbolic link.
    """
    pending = [part for part in relative.split("/") if part not in ("", ".")]
    pending.reverse()
    resolved: list[str] = []
    hops = 0
    while pending:
        part = pending.pop()
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = os.path.join(root, *resolved, part)
        if os.path.islink(candidate) and (pending or follow_last):
            hops += 1
            if hops > _SYMLINK_HOPS:
                raise OciError(f"too many symbolic links resolving {relative}")
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            pending.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
            continue
        resolved.append(part)
    return os.path.join(root, *resolved)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _member_parts(name: str) -> list[str]:
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    if ".." in parts:
        raise OciError(f"layer member {name!r} points outside the root")
    return parts


def _whiteout_target(member: str, name: str) -> str:
    """
    The entry whiteout ``name`` (the last component of layer member ``member``) deletes: one name in its
    directory.

    :raises OciError: for ``.wh.`` (the directory itself, by ``os.path.join``), ``.wh..`` (the directory)
        and ``.wh...`` (its parent: the tree's parent for a whiteout at its top), or a separator.
    """
    target = name[len(_WHITEOUT):]
    if target in ("", ".", "..") or any(separator in target for separator in ("/", "\\", "\0")):
        raise OciError(f"layer member {member!r} is a whiteout of {target!r}, which is not one entry of its directory")
    return target


def _prune_opaque(directory: str, relative: str, created: set[str]) -> None:
    """Remove what lower layers left in ``directory``: whatever this layer did not create."""
    for name in os.listdir(directory):
        child_relative = f"{relative}/{name}" if relative else name
        child = os.path.join(directory, name)
        if child_relative not in created:
            _remove(child)
        elif os.path.isdir(child) and not os.path.islink(child):
            _prune_opaque(child, child_relative, created)


@contextmanager
def _layer_tar(stream: IO[bytes]) -> Iterator[tarfile.TarFile]:
    magic = stream.read(4)
    stream.seek(0)
    if magic == _ZSTD_MAGIC:
        if shutil.which("zstd") is None:
            raise OciError("the layer is zstd-compressed and the zstd program is missing")
        with tempfile.TemporaryFile() as compressed:
            shutil.copyfileobj(stream, compressed)
            compressed.seek(0)
            process = subprocess.Popen(["zstd", "-d", "-c", "-q"], stdin=compressed, stdout=subprocess.PIPE)
            assert process.stdout is not None
            try:
                with tarfile.open(fileobj=process.stdout, mode="r|") as tar:
                    yield tar
                while process.stdout.read(1024 * 1024):
                    pass
            finally:
                process.stdout.close()
                code = process.wait()
            if code != 0:
                raise OciError(f"zstd failed ({code}) on the layer")
        return
    try:
        tar = tarfile.open(fileobj=stream, mode="r|*")
    except tarfile.TarError as error:
        raise OciError(f"the layer is not a tar file: {error}") from None
    with tar:
        yield tar


def apply_layer(stream: IO[bytes], root: str) -> int:
    """
    Apply one layer, read from the seekable ``stream``, to the tree ``root`` (which must exist).

    :return: how many members were applied (whiteouts included).
    :raises OciError: if a member's path climbs out of the tree, a whiteout names no single entry of its
        directory, a hard link's target is missing, or the layer is not a tar file.
    """
    created: set[str] = set()
    opaque: list[tuple[str, str]] = []
    count = 0
    try:
        with _layer_tar(stream) as tar:
            for member in tar:
                parts = _member_parts(member.name)
                count += 1
                if not parts:
                    continue
                relative = "/".join(parts)
                parent_relative = "/".join(parts[:-1])
                parent = resolve_inside(root, parent_relative)
                name = parts[-1]
                if name == _OPAQUE:
                    opaque.append((parent, parent_relative))
                    continue
                if name.startswith(_WHITEOUT):
                    _remove(os.path.join(parent, _whiteout_target(member.name, name)))
                    continue
                if not os.path.isdir(parent):
                    _remove(parent)
                    os.makedirs(parent, exist_ok=True)
                _extract(tar, member, root, os.path.join(parent, name))
                created.add(relative)
                for depth in range(1, len(parts)):
                    created.add("/".join(parts[:depth]))
    except tarfile.TarError as error:
        raise OciError(f"the layer is damaged: {error}") from None
    for directory, relative in opaque:
        if os.path.isdir(directory):
            _prune_opaque(directory, relative, created)
    return count


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, root: str, path: str) -> None:
    existing_dir = os.path.isdir(path) and not os.path.islink(path)
    if member.isdir():
        if not existing_dir:
            _remove(path)
            os.mkdir(path)
    else:
        _remove(path)
        if member.isfile():
            source = tar.extractfile(member)
            assert source is not None
            with source, open(path, "wb") as written:
                shutil.copyfileobj(source, written, 1024 * 1024)
        elif member.issym():
            os.symlink(member.linkname, path)
        elif member.islnk():
            target_parts = _member_parts(member.linkname)
            target = os.path.join(resolve_inside(root, "/".join(target_parts[:-1])), target_parts[-1]) \
                if target_parts else root
            if not os.path.lexists(target) or (os.path.isdir(target) and not os.path.islink(target)):
                raise OciError(f"hard link {member.name} -> {member.linkname}: no such file in the tree")
            os.link(target, path, follow_symlinks=False)
            return
        elif member.ischr() or member.isblk():
            kind = stat.S_IFCHR if member.ischr() else stat.S_IFBLK
            os.mknod(path, kind | (member.mode & 0o7777), os.makedev(member.devmajor, member.devminor))
        elif member.isfifo():
            os.mkfifo(path, member.mode & 0o7777)
        else:
            return
    os.lchown(path, member.uid, member.gid)
    if not member.issym():
        os.chmod(path, member.mode & 0o7777)
    os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
