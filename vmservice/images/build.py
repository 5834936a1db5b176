# -*- test-case-name: tests.images.test_build,tests.integration.images.test_boot -*-
"""
Building a guest image from its recipe: Debian packages in, ``vmlinux`` + ``initrd.img`` + ``rootfs.ext4``
+ ``manifest.json`` out.

An image directory holds ``<name>-<recipehash>/`` per build and the symbolic link ``<name>`` to the current
one. A build happens in a temporary directory beside them and is renamed into place only when complete,
then the link is replaced atomically, so a reader (:func:`vmservice.images.store.resolve_image`) never
sees half an image. A lock file serialises builders of one image. Downloaded packages are kept in
``.debs/`` and reused. After a build, builds older than the last few are removed unless in use
(:func:`prune_builds`).

This runs synchronously (it is a command-line tool and a step of ``make``), with ``subprocess``; the
daemon never builds images, it only resolves them.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from collections.abc import Mapping
from typing import Callable, Iterator, NotRequired, TypedDict

from twisted.python.filepath import FilePath

from vmservice.images import debian, postinst, rootfs
from vmservice.images.cpio import write_newc
from vmservice.images.initramfs import initramfs_entries
from vmservice.images.kernel import extract_vmlinux, module_load_order
from vmservice.images.recipe import Recipe, guest_sources, load_recipe, package_root, recipe_hash
from vmservice.images.store import (INITRD_FILE, KERNEL_FILE, MANIFEST_FILE, ROOTFS_FILE, Image,
                                    resolve_image)

__all__ = ["ArtefactRecord", "BuildError", "DEB_CACHE", "KEEP_BUILDS", "Manifest", "PYTHON_CHECK_MODULES", "build_image", "publish", "up_to_date",
           "has_ssh_server", "prune_builds"]

DEB_CACHE = ".debs"
# Old builds kept besides the current one (see prune_builds).
KEEP_BUILDS = 2
PYTHON_CHECK_MODULES = ("json", "struct", "selectors", "os", "socket", "time", "hashlib", "base64", "tarfile",
                        "subprocess", "pty", "signal", "ctypes")
# Programs whose shared libraries must all be present; a Python extension module without its library
# (say _dbm without libdb) is only reported.
_REQUIRED_PROGRAM_DIRS = ("usr/bin", "usr/sbin")


class BuildError(Exception):
    """
    The image could not be built; the message says which step failed and why.
    """


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


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


def _check_run(argv: list[str], what: str) -> str:
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"{what} failed ({result.returncode}): {' '.join(argv)}\n{result.stdout.strip()}")
    return result.stdout


class ArtefactRecord(TypedDict):
    """One file of a build in its manifest: its size in bytes and SHA-256 (hex)."""

    size: int
    sha256: str


class Manifest(TypedDict):
    """What ``manifest.json`` says of a build (see :func:`build_image`)."""

    name: str
    source: str
    recipe_hash: str
    ssh_server: bool
    built_at: str
    kernel_release: str
    kernel_package: str
    initramfs_modules: list[str]
    packages: dict[str, str]
    artefacts: dict[str, ArtefactRecord]
    build_seconds: NotRequired[float]


def _file_record(path: str) -> ArtefactRecord:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1024 * 1024), b""):
            digest.update(chunk)
    return {"size": os.path.getsize(path), "sha256": digest.hexdigest()}


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
            manifest = _build(recipe, digest, source, base, work, output, out, run)
            manifest["build_seconds"] = round(time.monotonic() - started, 1)
            publish(base, name, final_name, output, work, manifest)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for removed in prune_builds(base, name):
            out(f"removed old build {removed}")
    sizes = ", ".join(f"{file} {_mib(record['size'])}" for file, record in sorted(manifest["artefacts"].items()))
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


def _build(recipe: Recipe, digest: str, source: str, base: str, work: str, output: str,
           out: Callable[[str], None], run: debian.Runner) -> Manifest:
    try:
        kernel_package = debian.resolve_metapackage(recipe.kernel_metapackage, run)
        packages = list(recipe.packages)
        if recipe.resolve_dependencies:
            packages = debian.resolve_dependencies(packages, recipe.exclude_packages, run)
            out(f"dependencies: {len(recipe.packages)} packages need {len(packages) - len(recipe.packages)} more"
                f"{f' ({len(recipe.exclude_packages)} excluded)' if recipe.exclude_packages else ''}")
        debs = debian.fetch_packages([kernel_package, *packages], os.path.join(base, DEB_CACHE), run, out)
    except debian.AptError as error:
        raise BuildError(f"fetching packages: {error}") from None

    root = os.path.join(work, "root")
    out(f"unpacking {len(debs)} packages")
    try:
        debian.unpack(debs, root, run)
    except debian.AptError as error:
        raise BuildError(f"unpacking packages: {error}") from None
    rootfs.merge_usr(root)

    release = _kernel_release(root)
    with open(os.path.join(root, "boot", f"vmlinuz-{release}"), "rb") as stream:
        bzimage = stream.read()
    try:
        vmlinux = extract_vmlinux(bzimage)
    except Exception as error:
        raise BuildError(f"extracting vmlinux from {kernel_package}: {error}") from None
    with open(os.path.join(output, KERNEL_FILE), "wb") as stream:
        stream.write(vmlinux)
    out(f"vmlinux: {_mib(len(vmlinux))} (kernel {release}, from a {_mib(len(bzimage))} bzImage)")
    del vmlinux, bzimage

    modules_dir = os.path.join(root, "usr/lib/modules", release)
    _check_run(["depmod", "-b", root, release], "depmod")
    order = module_load_order(_read_text(os.path.join(modules_dir, "modules.dep")), recipe.initramfs_modules,
                              _read_text(os.path.join(modules_dir, "modules.builtin")).split())
    busybox = os.path.join(root, "usr/bin/busybox")
    applets = _check_run([busybox, "--list"], "busybox --list").split()
    modules = []
    for path in order:
        with open(os.path.join(modules_dir, path), "rb") as stream:
            modules.append((path, stream.read()))
    with open(busybox, "rb") as stream:
        busybox_binary = stream.read()
    with open(os.path.join(source, "guest/files/init"), "rb") as stream:
        init_script = stream.read()
    entries = initramfs_entries(init_script, busybox_binary, applets, modules)
    with open(os.path.join(output, INITRD_FILE), "wb") as stream:
        initrd_size = write_newc(entries, stream)
    out(f"initramfs: {_mib(initrd_size)} ({len(modules)} modules: "
        f"{' '.join(path.rsplit('/', 1)[-1][:-3] for path in order)})")

    _assemble_rootfs(root, source, out)
    image = os.path.join(output, ROOTFS_FILE)
    try:
        size = rootfs.make_ext4(root, image, recipe.rootfs_headroom_mib)
    except rootfs.RootfsError as error:
        raise BuildError(str(error)) from None
    out(f"rootfs: {_mib(size)} ext4 for {_mib(rootfs.tree_size(root))} of files")

    return {
        "name": recipe.name,
        "source": f"recipe:{recipe.name}",
        "recipe_hash": digest,
        "ssh_server": has_ssh_server(root),
        "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kernel_release": release,
        "kernel_package": kernel_package,
        "initramfs_modules": [path.rsplit("/", 1)[-1] for path in order],
        "packages": {deb.name: deb.version for deb in debs},
        "artefacts": {file: _file_record(os.path.join(output, file))
                      for file in (KERNEL_FILE, INITRD_FILE, ROOTFS_FILE)},
    }


def _read_text(path: str) -> str:
    with open(path) as stream:
        return stream.read()


def _kernel_release(root: str) -> str:
    releases = sorted(os.listdir(os.path.join(root, "usr/lib/modules")))
    if len(releases) != 1:
        raise BuildError(f"expected one kernel in the packages, found {releases or 'none'}")
    return releases[0]


def has_ssh_server(root: str) -> bool:
    """
    Whether the tree at ``root`` has the SSH server the guest agent starts (``/usr/sbin/sshd``), as the
    manifest's ``ssh_server`` records for the daemon.
    """
    path = os.path.join(root, "usr/sbin/sshd")
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _maintainer_steps(root: str, out: Callable[[str], None]) -> None:
    """The results of maintainer scripts the guest needs (see :mod:`vmservice.images.postinst`)."""
    users = postinst.add_system_users(root)
    if users:
        out(f"rootfs: system users {', '.join(users)}")
    certificates = postinst.select_ca_certificates(root)
    if certificates and os.path.exists(os.path.join(root, "usr/sbin/update-ca-certificates")):
        _check_run(["chroot", root, "/usr/sbin/update-ca-certificates", "--fresh"], "update-ca-certificates")
        bundle = os.path.join(root, postinst.CA_BUNDLE)
        if not os.path.isfile(bundle) or os.path.getsize(bundle) == 0:
            raise BuildError(f"update-ca-certificates did not write /{postinst.CA_BUNDLE}")
        out(f"rootfs: /{postinst.CA_BUNDLE} with {certificates} certificates")


def _assemble_rootfs(root: str, source: str, out: Callable[[str], None]) -> None:
    rootfs.prune(root)
    rootfs.add_base_files(root)
    # Before busybox's links, so that a real program gets a name busybox also has (awk).
    alternatives = postinst.install_alternatives(root)
    if alternatives:
        out(f"rootfs: alternatives {', '.join(alternatives)}")
    applets = _check_run([os.path.join(root, "usr/bin/busybox"), "--list-full"], "busybox --list-full")
    links = rootfs.install_busybox_links(root, applets.splitlines())
    rootfs.install_guest_files(root, source, guest_sources(source))
    # The guest has no ldconfig (it is in libc-bin); the host's writes the cache for the tree.
    _check_run(["ldconfig", "-r", root], "ldconfig -r")
    _maintainer_steps(root, out)
    missing = rootfs.missing_libraries(root, _REQUIRED_PROGRAM_DIRS)
    if missing:
        raise BuildError("programs lack shared libraries (add their packages to the recipe): "
                         + ", ".join(f"{m.path} needs {m.soname}" for m in missing))
    optional = rootfs.missing_libraries(root, ("usr/lib/python3.11/lib-dynload",))
    if optional:
        out("rootfs: Python extension modules without their libraries (not importable): "
            + ", ".join(sorted({f"{os.path.basename(m.path).split('.')[0]} ({m.soname})" for m in optional})))
    _check_run(["chroot", root, "/usr/bin/python3.11", "-I", "-m", "compileall", "-q",
                "--invalidation-mode", "unchecked-hash", "/usr/lib/python3.11"], "compiling the standard library")
    _check_run(["chroot", root, "/usr/bin/python3.11", "-I", "-m", "compileall", "-q", "/opt/vmservice"],
               "compiling the guest code")
    _check_run(["chroot", root, "/usr/bin/python3.11", "-I", "-S", "-c", "import " + ", ".join(PYTHON_CHECK_MODULES)],
               "importing the standard library in the root file system")
    _check_run(["chroot", root, "/bin/bash", "-c", "true"], "running bash in the root file system")
    guest_modules = ["vmservice.guest.powerbutton", "vmservice.guest.rootgrowth", "vmservice.guest.metrics"]
    if os.path.exists(os.path.join(root, "opt/vmservice/vmservice/guest/agent.py")):
        guest_modules.append("vmservice.guest.agent")
    _check_run(["chroot", root, "/usr/bin/python3.11", "-I", "-S", "-c",
                "import sys; sys.path.insert(0, '/opt/vmservice'); import " + ", ".join(guest_modules)],
               "importing the guest code in the root file system")
    out(f"rootfs: {links} busybox links, checked bash, python3.11 and {', '.join(guest_modules)}")
