# -*- test-case-name: tests.images.test_build,tests.integration.images.test_boot -*-
"""
Building a guest image from its recipe: Debian packages in, ``vmlinux`` + ``initrd.img`` + ``rootfs.ext4``
+ ``manifest.json`` out.

An image directory holds ``<name>-<recipehash>/`` per build and the symbolic link ``<name>`` to the current
one. A build happens in a temporary directory beside them (its artefacts made by
:mod:`vmservice.images.artefacts`) and is renamed into place only when complete, then the link is replaced
atomically, so a reader (:func:`vmservice.images.store.resolve_image`) never sees half an image. A lock
file serialises builders of one image. Downloaded packages are kept in ``.debs/`` and reused. After a
build, builds older than the last few are removed unless in use (:func:`prune_builds`).

This runs synchronously (it is a command-line tool and a step of ``make``), with ``subprocess``; the
daemon never builds images, it only resolves them.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from collections.abc import Mapping
from typing import Callable, Iterator

from twisted.python.filepath import FilePath

from vmservice.images import debian
from vmservice.images.artefacts import (DEB_CACHE, PYTHON_CHECK_MODULES, ArtefactRecord, BuildError, Manifest,
                                        build_artefacts, has_ssh_server, mib)
from vmservice.images.recipe import load_recipe, package_root, recipe_hash
from vmservice.images.store import MANIFEST_FILE, Image, resolve_image

__all__ = ["ArtefactRecord", "BuildError", "DEB_CACHE", "KEEP_BUILDS", "Manifest", "PYTHON_CHECK_MODULES", "build_image", "publish", "up_to_date",
           "has_ssh_server", "prune_builds"]

# Old builds kept besides the current one (see prune_builds).
KEEP_BUILDS = 2


@contextmanager
def _locked(image_dir: str, name: str) -> Iterator[None]:
    with open(os.path.join(image_dir, f".{name}.lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _point_link(image_dir: str, name: str, target_name: str) -> bool:
    """Make ``<image_dir>/<name>`` point at ``target_name`` (atomically); True if it changed."""
    link = os.path.join(image_dir, name)
    if os.path.islink(link) and os.readlink(link) == target_name:
        return False
    temporary = os.path.join(image_dir, f".{name}.link-{os.getpid()}")
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(target_name, temporary)
    os.replace(temporary, link)
    return True


def _open_paths() -> set[str]:
    """Every file some process on this machine has open (that we may look at)."""
    paths = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                paths.add(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                continue
    return paths


def prune_builds(image_dir: str, name: str, keep: int = KEEP_BUILDS) -> list[str]:
    """
    Remove old builds of image ``name``: every ``<name>-<hash>`` directory except the current one (the
    link's target), the ``keep`` most recent others, and any holding a file a process has open (a running
    node's QEMU keeps its disk's backing file open).

    Each build takes about 200 MB and every change to a guest file makes a new one, so without this the
    cache grows by that much per edit. A stopped node whose overlay names a removed build cannot start
    again; ``keep`` gives such nodes a grace period of a few rebuilds.

    :return: the names of the directories removed.
    """
    link = os.path.join(image_dir, name)
    current = os.readlink(link) if os.path.islink(link) else None
    builds = []
    for entry in os.listdir(image_dir):
        path = os.path.join(image_dir, entry)
        suffix = entry[len(name) + 1:]
        if (entry.startswith(f"{name}-") and len(suffix) == 16 and all(c in "0123456789abcdef" for c in suffix)
                and entry != current
                and os.path.isdir(path) and not os.path.islink(path)):
            builds.append((os.stat(path).st_mtime, entry))
    builds.sort(reverse=True)
    candidates = [entry for _mtime, entry in builds[keep:]]
    if not candidates:
        return []
    open_paths = _open_paths()
    removed = []
    for entry in candidates:
        prefix = os.path.join(image_dir, entry) + "/"
        if any(path.startswith(prefix) for path in open_paths):
            continue
        shutil.rmtree(os.path.join(image_dir, entry), ignore_errors=True)
        removed.append(entry)
    return removed


def build_image(image_dir: str | FilePath[str], name: str = "default", force: bool = False,
                out: Callable[[str], None] = print, *, source_root: str | None = None,
                run: debian.Runner = debian.run_command) -> Image:
    """
    Build image ``name`` into ``image_dir`` unless a build of the same recipe hash is already there.

    :param force: rebuild even if an image with this recipe hash exists (it is replaced).
    :param out: receives one human-readable progress line per step.
    :param source_root: the ``vmservice`` package directory to take the recipe and guest files from;
        this source tree by default.
    :param run: runs apt and dpkg commands (see :data:`vmservice.images.debian.Runner`).
    :return: the image, as :func:`vmservice.images.store.resolve_image` finds it afterwards.
    :raises BuildError: if a step fails; nothing is left behind but the download cache.
    """
    started = time.monotonic()
    base = os.path.abspath(image_dir.path if isinstance(image_dir, FilePath) else os.fspath(image_dir))
    source = source_root or package_root()
    recipe = load_recipe(name, source)
    digest = recipe_hash(recipe, source)
    final_name = f"{name}-{digest}"
    final = os.path.join(base, final_name)
    os.makedirs(base, exist_ok=True)
    with _locked(base, name):
        if os.path.isdir(final) and not force:
            return up_to_date(base, name, final_name, out)
        out(f"image {name}: building recipe {digest} in {base}")
        work = tempfile.mkdtemp(prefix=f".build-{name}-", dir=base)
        try:
            output = os.path.join(work, "image")
            os.mkdir(output)
            manifest = build_artefacts(recipe, digest, source, base, work, output, out, run)
            manifest["build_seconds"] = round(time.monotonic() - started, 1)
            publish(base, name, final_name, output, work, manifest)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for removed in prune_builds(base, name):
            out(f"removed old build {removed}")
    sizes = ", ".join(f"{file} {mib(record['size'])}" for file, record in sorted(manifest["artefacts"].items()))
    out(f"done in {manifest['build_seconds']} s: {final} ({sizes})")
    return resolve_image(base, name)


def up_to_date(image_dir: str, name: str, final_name: str, out: Callable[[str], None]) -> Image:
    """
    Image ``name`` whose build ``<image_dir>/<final_name>`` is already there: the ``<name>`` link
    pointed at it (again, if it had moved), and said so.
    """
    moved = _point_link(image_dir, name, final_name)
    out(f"image {name}: up to date ({os.path.join(image_dir, final_name)}){' (link updated)' if moved else ''}")
    return resolve_image(image_dir, name)


def publish(image_dir: str, name: str, final_name: str, output: str, work: str,
            manifest: Mapping[str, object]) -> None:
    """
    Make the finished build in ``output`` image ``name``'s current one: write its manifest, move it to
    ``<image_dir>/<final_name>`` (a build already there goes to ``work``, removed with it) and point the
    ``<name>`` link at it.  Called with the image's lock held.
    """
    with open(os.path.join(output, MANIFEST_FILE), "w") as stream:
        json.dump(manifest, stream, indent=2, sort_keys=True)
        stream.write("\n")
    final = os.path.join(image_dir, final_name)
    if os.path.exists(final):
        os.rename(final, os.path.join(work, "replaced"))
    os.rename(output, final)
    _point_link(image_dir, name, final_name)
