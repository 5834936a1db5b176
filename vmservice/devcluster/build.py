# -*- test-case-name: tests.devcluster.test_build -*-
"""
Building the control plane's cache entry: ``<cache>/<key>/bin/`` with kube-apiserver, kube-scheduler and
kube-controller-manager compiled from Debian's source package ``kubernetes`` with Debian's Go, and etcd,
etcdctl and kubectl unpacked from Debian's binary packages (never installed: installing ``etcd-server``
would start a system etcd).

The entry is named by :func:`vmservice.devcluster.recipe.cache_key`; when it exists, nothing is done.
Otherwise the build runs in a private directory under the cache (2.3 GB of source and objects, the Go
caches included, so nothing is left in the home directory), its results are copied into a temporary
entry renamed into place when complete (an interrupted build leaves no half entry), and the build
directory is removed, whether the build succeeded or not. A lock file serialises builders. Each step
prints its duration; the compilation (about six minutes of two cores) prints a line every half minute.

A command-line tool's synchronous code (``subprocess``); the daemon never imports it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Sequence

from vmservice.devcluster.recipe import (BINARIES, BUILT, EXTRACTED, KEY_PACKAGES, cache_key, current_versions,
                                         recipe_sources)
from vmservice.devcluster.sources import source_lists
from vmservice.images.debian import AptError, fetch_packages, run_command, unpack
from vmservice.private_files import private_directory

__all__ = ["DEFAULT_CACHE_DIR", "BuildFailed", "build_entry", "complete", "entry_path"]

#: Where entries are kept unless ``--cache-dir`` says otherwise.
DEFAULT_CACHE_DIR = "/var/cache/vmservice/controlplane"

#: The Debian packages the build needs on the host (installed without their recommendations if missing).
TOOLCHAIN = ("golang-go", "rsync", "make", "dpkg-dev")

#: Seconds between two progress lines of the compilation.
HEARTBEAT = 30.0

Out = Callable[[str], None]


class BuildFailed(Exception):
    """A step of the build failed; the message says which and why."""


def _run(argv: Sequence[str], cwd: str | None = None) -> str:
    try:
        return run_command(argv, cwd)
    except AptError as error:
        raise BuildFailed(str(error)) from None


@contextmanager
def _step(out: Out, what: str) -> Iterator[None]:
    started = time.monotonic()
    out(f"{what} ...")
    yield
    out(f"{what}: done in {time.monotonic() - started:.1f} s")


def complete(entry: str) -> bool:
    """Whether ``entry`` holds every program of an entry and its manifest."""
    return os.path.isfile(os.path.join(entry, "manifest.json")) and all(
        os.path.isfile(os.path.join(entry, "bin", name)) for name in BINARIES)


def entry_path(cache_dir: str) -> tuple[str, dict[str, str]]:
    """``(entry, versions)``: the path of the entry the recipe calls for now, and the versions in its key."""
    versions = current_versions(lambda argv: _run(argv))
    if len(versions) < len(KEY_PACKAGES):
        _run(["apt-get", "update", "-qq"])  # a fresh machine whose package lists were never fetched
        versions = current_versions(lambda argv: _run(argv))
    return os.path.join(cache_dir, cache_key(recipe_sources(), versions)), versions


def build_entry(cache_dir: str = DEFAULT_CACHE_DIR, out: Out = print) -> str:
    """
    Make sure the entry of the current recipe exists under ``cache_dir``; its path.

    :raise BuildFailed: a step failed (the build directory is gone all the same).
    """
    private_directory(cache_dir, repair=True)
    entry, versions = entry_path(cache_dir)
    if complete(entry):
        out(f"control plane up to date: {entry}")
        return entry
    with _locked(cache_dir):
        if complete(entry):
            out(f"control plane up to date: {entry} (built meanwhile)")
            return entry
        started = time.monotonic()
        out(f"building the control plane into {entry} (about 6 minutes of 2 cores, 2.3 GB of disk meanwhile)")
        _remove_leftovers(cache_dir)
        build_dir = tempfile.mkdtemp(prefix="build-", dir=cache_dir)
        try:
            _build(build_dir, entry, versions, out)
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
        out(f"control plane built in {time.monotonic() - started:.0f} s: {entry}")
    return entry


@contextmanager
def _locked(cache_dir: str) -> Iterator[None]:
    with open(os.path.join(cache_dir, ".build.lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _remove_leftovers(cache_dir: str) -> None:
    """Remove what a killed build left (only a builder holding the lock gets here, so none is running)."""
    for name in os.listdir(cache_dir):
        if name.startswith(("build-", ".entry-")):
            shutil.rmtree(os.path.join(cache_dir, name), ignore_errors=True)


def _build(build_dir: str, entry: str, versions: dict[str, str], out: Out) -> None:
    with _step(out, "enabling Debian's source lists"):
        _enable_sources()
    with _step(out, f"installing what the build needs ({', '.join(TOOLCHAIN)}) if missing"):
        _install_toolchain(out)
    with _step(out, "fetching the kubernetes source package"):
        tree = _fetch_source(build_dir)
    with _step(out, f"unpacking {', '.join(sorted(set(EXTRACTED.values())))}"):
        debs = fetch_packages(sorted(set(EXTRACTED.values())), os.path.join(build_dir, "debs"), _run, out)
        unpack(debs, os.path.join(build_dir, "unpacked"), _run)
    with _step(out, f"compiling {', '.join(BUILT)}"):
        _compile(build_dir, tree, out)
    with _step(out, "storing the entry"):
        programs = {name: os.path.join(tree, "_output", "bin", name) for name in BUILT}
        programs.update({name: os.path.join(build_dir, "unpacked", "usr", "bin", name) for name in EXTRACTED})
        manifest = {"key": os.path.basename(entry), "versions": versions, "source": os.path.basename(tree),
                    "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        _store(entry, programs, manifest)


def _enable_sources() -> None:
    path, text = source_lists()
    if not text:
        raise BuildFailed("the machine's apt lists have no deb entry to derive a deb-src entry from")
    current = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            current = f.read()
    if current != text:
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temporary, 0o644)  # apt reads it as _apt
        os.replace(temporary, path)
    _run(["apt-get", "update", "-qq"])


def _install_toolchain(out: Out) -> None:
    missing = []
    for name in TOOLCHAIN:
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True)
        if "ok installed" not in status.stdout:
            missing.append(name)
    if missing:
        out(f"  installing {' '.join(missing)}")
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        result = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                                env=environment, capture_output=True, text=True)
        if result.returncode != 0:
            raise BuildFailed(f"apt-get install {' '.join(missing)} failed: {result.stderr.strip()[-2000:]}")


def _fetch_source(build_dir: str) -> str:
    # Sandbox::User=root: the build directory is in the private cache, where apt's _apt user cannot write.
    _run(["apt-get", "source", "-qq", "-o", "APT::Sandbox::User=root", "kubernetes"], build_dir)
    trees = [name for name in os.listdir(build_dir)
             if name.startswith("kubernetes-") and os.path.isdir(os.path.join(build_dir, name))]
    if len(trees) != 1:
        raise BuildFailed(f"apt-get source kubernetes unpacked {trees or 'nothing'}")
    return os.path.join(build_dir, trees[0])


def _compile(build_dir: str, tree: str, out: Out) -> None:
    go = os.path.join(build_dir, "go")
    environment = {**os.environ, "CGO_ENABLED": "0", "GOCACHE": os.path.join(go, "cache"),
                   "GOPATH": os.path.join(go, "path"), "GOMODCACHE": os.path.join(go, "path", "mod"),
                   "HOME": os.path.join(go, "home"), "GOFLAGS": ""}
    log_path = os.path.join(build_dir, "make.log")
    started = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(["make", "WHAT=" + " ".join(f"cmd/{name}" for name in BUILT)], cwd=tree,
                                   env=environment, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            while True:
                try:
                    status = process.wait(timeout=HEARTBEAT)
                    break
                except subprocess.TimeoutExpired:
                    out(f"  compiling: {time.monotonic() - started:.0f} s ({_last_line(log_path)})")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    if status != 0:
        raise BuildFailed(f"make failed ({status}); its last lines:\n{_tail(log_path, 30)}")


def _tail(path: str, lines: int) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - 16384))
        return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])


def _last_line(path: str) -> str:
    last = _tail(path, 1).strip()
    return last[:100] if last else "no output yet"


def _store(entry: str, programs: Mapping[str, str], manifest: Mapping[str, object]) -> None:
    missing = [path for path in programs.values() if not os.path.isfile(path)]
    if missing:
        raise BuildFailed(f"the build made no {', '.join(missing)}")
    temporary = tempfile.mkdtemp(prefix=".entry-", dir=os.path.dirname(entry))
    try:
        os.mkdir(os.path.join(temporary, "bin"), 0o700)
        for name, path in programs.items():
            shutil.copyfile(path, os.path.join(temporary, "bin", name))
            os.chmod(os.path.join(temporary, "bin", name), 0o700)
        with open(os.path.join(temporary, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, sort_keys=True)
        os.chmod(os.path.join(temporary, "manifest.json"), 0o600)
        os.rename(temporary, entry)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
