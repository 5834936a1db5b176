# -*- test-case-name: tests.images.oci.test_manifests -*-
"""
The image picked from a source (:func:`open_source`): in an OCI index, manifests for other platforms are
skipped and nested indexes are followed, so a multi-platform image gives its ``linux/amd64`` manifest; a
``ref`` picks among several images by their ``org.opencontainers.image.ref.name`` annotation (OCI) or
repository tag (docker ``manifest.json``).  Every blob read from an OCI layout is checked against its
digest.
"""

from __future__ import annotations

import hashlib
import json
from typing import Sequence

from attrs import frozen

from .errors import OciError
from .source import ImageSource

#: The platform picked from a multi-platform image: what our guests run.
OCI_PLATFORM = ("linux", "amd64")

_INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
                "application/vnd.docker.distribution.manifest.list.v2+json")


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


def _blob_path(digest: object) -> str:
    """The path of the blob ``digest`` (``sha256:<hex>`` only) in an OCI layout."""
    if not isinstance(digest, str) or ":" not in digest:
        raise OciError(f"bad digest {digest!r}")
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64 or any(c not in "0123456789abcdef" for c in hexdigest):
        raise OciError(f"unsupported digest {digest!r} (sha256 only)")
    return f"blobs/sha256/{hexdigest}"


def _mapping(value: object, what: str) -> dict[str, object]:
    """``value``, which must be a JSON object (``what`` names it in the error)."""
    if not isinstance(value, dict):
        raise OciError(f"{what} is not a JSON object")
    return value


def _list(value: object, what: str) -> list[object]:
    """``value``, which must be a JSON list (``what`` names it in the error)."""
    if not isinstance(value, list):
        raise OciError(f"{what} is not a JSON list")
    return value


def _platform_of(config: dict[str, object]) -> tuple[str, str]:
    """The (os, architecture) an image configuration says."""
    return (str(config.get("os", "")), str(config.get("architecture", "")))


def _describe(platform: tuple[str, str]) -> str:
    """A platform as ``os/architecture``, ``?`` for what is missing."""
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
    """Whether the reference ``ref`` is the one ``wanted`` (whole, its tag, or its name without the tag)."""
    return bool(wanted) and (ref == wanted or ref.endswith(f":{wanted}") or ref.rsplit(":", 1)[0] == wanted)


def _open_oci(source: ImageSource, wanted_ref: str) -> ContainerImage:
    """The image of an OCI layout's ``index.json`` (its layers checked against their digests)."""
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
    """The image of a ``docker save`` tar file's ``manifest.json``."""
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
    """The one image of ``images``; else an error that says what there was (``seen_platforms``)."""
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


__all__ = ["OCI_PLATFORM", "ContainerImage", "open_source"]
