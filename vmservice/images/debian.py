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
