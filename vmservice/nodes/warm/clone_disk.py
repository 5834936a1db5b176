# -*- test-case-name: tests.nodes.warm.test_cloning,tests.nodes.warm.test_forking -*-
"""
A clone's disk: a copy of its template's *empty overlay*.

Every clone's disk is an empty qcow2 overlay over the template's frozen disk,
of the template's disk size: the same bytes for every clone (the header names
the frozen disk by its absolute path, nothing of the node).  So the template
keeps one, ``<template>/empty.qcow2``, made once with :class:`IDisks`
(``qemu-img``) right after its build, and a clone's disk is a copy of it: a
fraction of a millisecond of file copying in place of a ``qemu-img``
process (15–60 ms here, more on a busy machine).  One deleted under the
daemon is made again by the next clone.  A fork's children get their disks
the same way, from one empty overlay over the fork's frozen disk.
"""

from __future__ import annotations

import os
import shutil
from ...storage.interfaces import IDisks
from ..paths import discard
from .template_files import Template


async def make_empty_overlay(disks: IDisks, base: str, path: str, size: int) -> None:
    """
    Make ``path`` an empty overlay of ``size`` bytes over ``base``, under a
    name of its own first (others may be copying the one it replaces).
    """
    partial = f"{path}.{os.urandom(3).hex()}"
    try:
        await disks.create(base, partial, size)
        os.replace(partial, path)
    finally:
        discard(partial)


async def make_clone_disk(template: Template, disks: IDisks, path: str) -> None:
    """Make ``path`` a clone's disk of ``template``: a copy of its empty overlay (made first if it is missing)."""
    if not os.path.exists(template.empty_overlay):
        await make_empty_overlay(disks, template.disk, template.empty_overlay, template.key.storage_size)
    shutil.copyfile(template.empty_overlay, path)


__all__ = ["make_clone_disk", "make_empty_overlay"]
