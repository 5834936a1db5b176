# -*- test-case-name: tests.api.test_openapi -*-
"""
The daemon's own shapes: every error, ``GET /info`` and ``GET /images``.
"""

from __future__ import annotations

from datetime import datetime

from attrs import frozen


@frozen
class ErrorResponse:
    """Every error: a message and a stable snake_case code."""

    error: str
    code: str | None = None


@frozen
class Info:
    """The daemon's version (``GET /info``)."""

    version: str
    git_commit: str
    platform: str
    arch: str


@frozen
class ImageSummary:
    """
    A built guest image (``GET /images``): ``size`` is the bytes of its
    kernel, initramfs and root file system; ``source`` is ``recipe:NAME`` or
    ``oci:REFERENCE``; ``recipe_hash`` is the key of its build.
    """

    name: str
    size: int
    created: datetime
    source: str
    recipe_hash: str | None = None
    ssh_server: bool | None = None
