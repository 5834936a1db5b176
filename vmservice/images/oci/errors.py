# -*- test-case-name: tests.images.oci.test_manifests,tests.images.oci.test_layers -*-
"""The one error of reading container images and applying their layers."""

from __future__ import annotations


class OciError(Exception):
    """
    The file is not a container image we can read, has no ``linux/amd64`` image, or a layer is unsafe or
    damaged; the message says which.
    """


__all__ = ["OciError"]
