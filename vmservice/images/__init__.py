# -*- test-case-name: tests.images.test_store -*-
"""
Guest images: built from Debian packages by :mod:`vmservice.images.build` (``python -m vmservice.images
build``) or imported from a container image by :mod:`vmservice.images.imported` (``python -m
vmservice.images import``), and found by the daemon with :func:`resolve_image`.
"""

from vmservice.images.store import Image, ImageNotFound, default_image_dir, resolve_image

__all__ = ["Image", "ImageNotFound", "default_image_dir", "resolve_image"]
