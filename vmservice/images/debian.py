# -*- test-case-name: tests.images.test_debian -*-
"""
Fetching and unpacking Debian packages with the machine's own apt configuration.

Images are made of Debian packages because that is the one registry of binaries every host here can
reach, and because Debian's builds of the kernel, Python and busybox are what the rest of the project was
measured with. The builder does not install anything on the host: ``apt-get download`` fetches the
``.deb`` files of the candidate versions into a cache directory, where later builds find them again, and
``dpkg-deb -x`` unpacks them into a staging tree.

All commands go through a :data:`Runner`, so tests can replay apt's answers without apt.
"""

from __future__ import annotations

import os
import subprocess
from typing import Callable, Iterable, Sequence

from attrs import frozen

__all__ = [
    "AptError",
    "DebFile",
    "Runner",
    "deb_file_name",
    "fetch_packages",
    "read_deb_fields",
    "resolve_dependencies",
    "resolve_metapackage",
    "run_command",
    "unpack",
]

Runner = Callable[[Sequence[str], "str | None"], str]
"""
Runs ``argv`` (in directory ``cwd`` if given) and returns its standard output; raises :class:`AptError`
with the command's error output if it fails.
"""


class AptError(Exception):
    """
    apt or dpkg failed: a package is unknown, a download failed, a ``.deb`` is damaged.
    """


@frozen
class DebFile:
    """
    A downloaded package.

    :ivar name: the package name.
    :ivar version: the version, with epoch (``1:1.35.0-4+deb12u1+b1``), as the manifest records it.
    :ivar path: the ``.deb`` file in the download cache.
    """

    name: str
    version: str
    path: str


def run_command(argv: Sequence[str], cwd: str | None = None) -> str:
    """
    The real :data:`Runner`: run ``argv`` and return its output, or raise :class:`AptError`.
    """
    try:
        result = subprocess.run(list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                check=False, text=True)
    except OSError as error:
        raise AptError(f"cannot run {argv[0]}: {error}") from None
    if result.returncode != 0:
        raise AptError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def resolve_metapackage(metapackage: str, run: Runner) -> str:
    """
    The package a metapackage currently depends on, e.g. ``linux-image-cloud-amd64`` ->
    ``linux-image-6.1.0-56-cloud-amd64``, from ``apt-cache depends``.

    :raises AptError: if apt does not know the metapackage or it depends on nothing.
    """
    output = run(["apt-cache", "depends", metapackage], None)
    for line in output.splitlines():
        key, _, value = line.strip().lstrip("|").partition(":")
        if key in ("Depends", "PreDepends"):
            target = value.strip()
            if target and not target.startswith("<"):
                return target
    raise AptError(f"apt-cache depends {metapackage}: no dependency found")


#: A dependency as ``apt-cache depends`` prints it: its alternatives in order, each a package name and
#: whether it is virtual (no package of that name, only packages that provide it), and the providers
#: apt lists for it.
_Alternative = tuple[str, bool, tuple[str, ...]]


def _dependency_name(target: str, architecture: str) -> tuple[str, bool] | None:
    """``(name, virtual)`` of a dependency target such as ``libc6``, ``<perl:any>`` or ``foo:i386``;
    None for a package of another architecture."""
    virtual = target.startswith("<") and target.endswith(">")
    name = target[1:-1] if virtual else target
    name, _, qualifier = name.partition(":")
    if qualifier and qualifier not in ("any", "native", architecture):
        return None
    return name, virtual


def _parse_depends(text: str, architecture: str) -> dict[str, list[list[_Alternative]]]:
    """
    ``{package: [dependency, ...]}`` from ``apt-cache depends`` output, each dependency the list of its
    alternatives (``|Depends:`` joins a line to the next). Only ``Depends`` and ``PreDepends`` are kept;
    virtual packages' own entries (``<name>`` at the start of a line) are not packages and are skipped.
    """
    graph: dict[str, list[list[tuple[str, bool, list[str]]]]] = {}
    current: list[list[tuple[str, bool, list[str]]]] | None = None
    last: tuple[str, bool, list[str]] | None = None  # the last dependency line's alternative
    joined = False
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace() and line[0] != "|":
            current = None if line.startswith("<") else graph.setdefault(line.strip().partition(":")[0], [])
            last, joined = None, False
            continue
        if line.startswith("    "):  # a package providing the last dependency's target
            named = _dependency_name(line.strip(), architecture)
            if last is not None and named is not None:
                last[2].append(named[0])
            continue
        if current is None:
            continue
        stripped = line.strip()
        key, _, target = stripped.lstrip("|").partition(":")
        named = _dependency_name(target.strip(), architecture) if key in ("Depends", "PreDepends") else None
        if not joined:
            current.append([])
        joined = stripped.startswith("|")
        last = None if named is None else (named[0], named[1], [])
        if last is not None:
            current[-1].append(last)
    return {package: [[(name, virtual, tuple(providers)) for name, virtual, providers in group]
                      for group in groups if group]
            for package, groups in graph.items()}


def resolve_dependencies(packages: Sequence[str], exclude: Iterable[str], run: Runner) -> list[str]:
    """
    ``packages`` and every package they need, recursively: each ``Depends`` and ``Pre-Depends`` of the
    candidate versions, for the host's architecture (``dpkg --print-architecture``), from one
    ``apt-cache depends --recurse``. Versions are not compared: the candidate of each package is what
    gets fetched.

    A dependency already satisfied by a package of the set (one of its alternatives, or a provider of a
    virtual alternative) adds nothing. One that names an excluded package (or a virtual package an
    excluded one provides) is left out on purpose. Otherwise its first alternative is taken; a virtual
    alternative is satisfied by its first provider.

    :return: the names, ``packages`` first, then the others in the order they were found.
    :raises AptError: if a dependency has no alternative apt knows a package for.
    """
    architecture = run(["dpkg", "--print-architecture"], None).strip()
    output = run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                  "--no-breaks", "--no-replaces", "--no-enhances", "-o", f"APT::Architectures={architecture}",
                  *packages], None)
    graph = _parse_depends(output, architecture)
    excluded = set(exclude)
    chosen = dict.fromkeys(packages)
    queue = list(packages)
    while queue:
        package = queue.pop(0)
        for group in graph.get(package, []):
            candidates = [provider for name, virtual, providers in group
                          for provider in ((*providers,) if virtual else (name,))]
            if any(name in chosen for name in candidates) or any(name in excluded for name in candidates):
                continue
            if any(name in excluded for name, _virtual, _providers in group):
                continue
            if not candidates:
                names = " | ".join(name for name, _virtual, _providers in group)
                raise AptError(f"{package} depends on {names}, which no package provides")
            chosen[candidates[0]] = None
            queue.append(candidates[0])
    return list(chosen)


def _parse_records(text: str) -> list[dict[str, str]]:
    records: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                records.append(fields)
                fields = {}
            continue
        if line[0].isspace():
            continue  # continuation of a multi-line field (Description)
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if fields:
        records.append(fields)
    return records


def deb_file_name(name: str, version: str, architecture: str) -> str:
    """
    The file name ``apt-get download`` gives a package: the epoch's colon is written ``%3a``.
    """
    return f"{name}_{version.replace(':', '%3a')}_{architecture}.deb"


def read_deb_fields(path: str, run: Runner) -> tuple[str, str]:
    """
    ``(package, version)`` from a ``.deb`` file's control data.

    :raises AptError: if the file is not a readable package (e.g. a download cut short).
    """
    records = _parse_records(run(["dpkg-deb", "-f", path, "Package", "Version"], None))
    fields = records[0] if records else {}
    if "Package" not in fields or "Version" not in fields:
        raise AptError(f"{path}: no Package/Version in its control data")
    return fields["Package"], fields["Version"]


def _candidates(packages: list[str], run: Runner) -> dict[str, tuple[str, str]]:
    """``{name: (version, architecture)}`` of the candidate versions, from one ``apt-cache show``."""
    output = run(["apt-cache", "show", "--no-all-versions", *packages], None)
    found: dict[str, tuple[str, str]] = {}
    for record in _parse_records(output):
        name = record.get("Package")
        if name and "Version" in record and "Architecture" in record:
            found.setdefault(name, (record["Version"], record["Architecture"]))
    missing = [name for name in packages if name not in found]
    if missing:
        raise AptError(f"apt-cache show: no candidate version of {', '.join(missing)}")
    return found


def fetch_packages(packages: Iterable[str], cache_dir: str, run: Runner,
                   out: Callable[[str], None] = print) -> list[DebFile]:
    """
    Make sure the candidate version of every package is in ``cache_dir`` and return them, in the order
    given. Files already there and readable are reused; the others are fetched with one
    ``apt-get download``.

    If apt knows none of the packages (a fresh machine whose package lists were never fetched), the lists
    are updated once with ``apt-get update`` and the question asked again.

    :param out: receives one progress line.
    """
    names = list(dict.fromkeys(packages))
    os.makedirs(cache_dir, exist_ok=True)
    try:
        candidates = _candidates(names, run)
    except AptError:
        run(["apt-get", "update", "-qq"], None)
        candidates = _candidates(names, run)
    files = {name: os.path.join(cache_dir, deb_file_name(name, *candidates[name])) for name in names}
    missing = []
    for name in names:
        path = files[name]
        if os.path.exists(path):
            try:
                read_deb_fields(path, run)
                continue
            except AptError:
                os.unlink(path)
        missing.append(name)
    out(f"fetching {len(names)} packages ({len(missing)} to download, {len(names) - len(missing)} cached)")
    if missing:
        # Sandbox::User=root: the cache belongs to root and apt's unprivileged _apt user cannot write it.
        run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root"]
            + [f"{name}={candidates[name][0]}" for name in missing], cache_dir)
    result = []
    for name in names:
        package, version = read_deb_fields(files[name], run)
        if package != name:
            raise AptError(f"{files[name]} holds {package}, not {name}")
        result.append(DebFile(name=name, version=version, path=files[name]))
    return result


def unpack(debs: Iterable[DebFile], destination: str, run: Runner) -> None:
    """
    Unpack the files of each package into ``destination`` with ``dpkg-deb -x`` (no maintainer scripts
    run: the image has no dpkg database, and needs none).
    """
    os.makedirs(destination, exist_ok=True)
    for deb in debs:
        run(["dpkg-deb", "-x", deb.path, destination], None)
