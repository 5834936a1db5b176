# -*- test-case-name: tests.devcluster.test_recipe -*-
"""
What the control plane's cache entry is made of, and the key that says when it must be made again.

The key hashes the recipe: the source of the modules that build the entry and the versions of what goes
in, as apt would take them now (the installed version, else the candidate): the ``kubernetes`` source
package (whose version its binary package ``kubernetes-client`` carries), ``etcd-server``,
``etcd-client`` and the Go toolchain (``golang-go``). Those versions come from ``apt-cache policy``,
which needs no source lists, so that checking an up-to-date entry is quick and changes nothing.
"""

from __future__ import annotations

import hashlib
import os
from typing import Callable, Mapping, Sequence

__all__ = [
    "BINARIES",
    "BUILT",
    "EXTRACTED",
    "KEY_PACKAGES",
    "RECIPE_MODULES",
    "RecipeError",
    "cache_key",
    "current_versions",
    "parse_policy",
    "recipe_sources",
]

#: The programs built from the ``kubernetes`` source package (``make WHAT=cmd/NAME``).
BUILT = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")

#: The programs taken from binary packages: ``{program: package}`` (unpacked, never installed).
EXTRACTED = {"etcd": "etcd-server", "etcdctl": "etcd-client", "kubectl": "kubernetes-client"}

#: Every program of an entry (in its ``bin/``).
BINARIES = BUILT + tuple(EXTRACTED)

#: The packages whose versions are in the key.
KEY_PACKAGES = ("kubernetes-client", "etcd-server", "etcd-client", "golang-go")

#: The modules whose source is in the key: the recipe and the build.
RECIPE_MODULES = ("recipe.py", "build.py", "sources.py")


class RecipeError(Exception):
    """A version the key needs is not known to apt."""


def parse_policy(text: str) -> dict[str, str]:
    """
    ``{package: version}`` from ``apt-cache policy`` output: the installed version, else the candidate
    (packages apt knows no version of are left out).
    """
    versions: dict[str, str] = {}
    package = ""
    fields: dict[str, str] = {}

    def close() -> None:
        chosen = fields.get("Installed", "(none)")
        chosen = fields.get("Candidate", "(none)") if chosen == "(none)" else chosen
        if package and chosen != "(none)":
            versions[package] = chosen

    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            close()
            package, fields = line[:-1], {}
        elif line.startswith("  ") and not line.startswith("   "):
            key, _, value = line.strip().partition(":")
            fields.setdefault(key, value.strip())
    close()
    return versions


def recipe_sources(directory: str | None = None) -> dict[str, bytes]:
    """The source of each module of :data:`RECIPE_MODULES` (from this package, or ``directory``)."""
    directory = directory or os.path.dirname(os.path.abspath(__file__))
    sources = {}
    for name in RECIPE_MODULES:
        with open(os.path.join(directory, name), "rb") as f:
            sources[name] = f.read()
    return sources


def cache_key(sources: Mapping[str, bytes], versions: Mapping[str, str]) -> str:
    """
    The name of the cache entry for this recipe: ``controlplane-`` and 20 hex digits of a hash of the
    modules' sources and the packages' versions (in a fixed order, so it does not depend on a listing).

    :raise RecipeError: a package of :data:`KEY_PACKAGES` has no version.
    """
    missing = [name for name in KEY_PACKAGES if name not in versions]
    if missing:
        raise RecipeError(f"apt knows no version of {', '.join(missing)} (is apt-get update needed?)")
    digest = hashlib.sha256()
    for name in sorted(sources):
        digest.update(b"module\0%s\0%d\0" % (name.encode(), len(sources[name])) + sources[name])
    for name in KEY_PACKAGES:
        digest.update(b"package\0%s\0%s\0" % (name.encode(), versions[name].encode()))
    return "controlplane-" + digest.hexdigest()[:20]


def current_versions(run: Callable[[Sequence[str]], str]) -> dict[str, str]:
    """The versions of :data:`KEY_PACKAGES` apt would use now (``run`` runs a command, returns its output)."""
    return parse_policy(run(["apt-cache", "policy", *KEY_PACKAGES]))
