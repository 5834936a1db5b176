# -*- test-case-name: tests.images.oci -*-
"""
Reading container images as users have them, and unpacking their layers into a root tree.

Two forms are read, both without any registry:

- an OCI image layout: a directory holding ``oci-layout``, ``index.json`` and ``blobs/sha256/<hex>``
  (what ``skopeo copy ... oci:DIR``, ``buildah push ... oci:DIR`` or ``docker buildx --output type=oci``
  write), or the same packed in a tar file;
- a ``docker save`` tar file: ``manifest.json`` naming each image's config and layer files (older Docker
  writes ``<id>/layer.tar``; Docker 25 and later write an OCI layout inside the tar file as well, and that
  is what is read then).

By topic: the source's files (:mod:`.source`), the image picked from its manifests
(:mod:`.manifests`: :func:`open_source`), the layers applied (:mod:`.layers`: :func:`apply_layer`),
paths resolved inside a tree (:mod:`.paths`: :func:`resolve_inside`) and the one error
(:mod:`.errors`: :class:`OciError`).  The names other modules use are re-exported here.
"""

from .errors import OciError
from .layers import apply_layer
from .manifests import OCI_PLATFORM, ContainerImage, open_source
from .paths import resolve_inside
from .source import ImageSource

__all__ = [
    "OCI_PLATFORM",
    "ContainerImage",
    "ImageSource",
    "OciError",
    "apply_layer",
    "open_source",
    "resolve_inside",
]
