# -*- test-case-name: tests.images.test_build,tests.integration.images.test_boot -*-
"""
A recipe build's artefacts, made in its work directory (:func:`build_artefacts`): the recipe's Debian
packages fetched and unpacked into a tree, then ``vmlinux`` (extracted from the kernel package's bzImage),
``initrd.img`` (busybox, our init and the kernel modules the recipe names), ``rootfs.ext4`` (the tree
pruned, completed and checked) and the :class:`Manifest` that describes them.  :mod:`.build` puts a
finished build in its place.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import subprocess
from typing import Callable, NotRequired, TypedDict

from vmservice.images import debian, postinst, rootfs
from vmservice.images.accounts import AccountError, add_accounts
from vmservice.images.cpio import write_newc
from vmservice.images.initramfs import initramfs_entries
from vmservice.images.kernel import extract_vmlinux, module_load_order
from vmservice.images.recipe import Recipe, guest_sources
from vmservice.images.store import INITRD_FILE, KERNEL_FILE, ROOTFS_FILE

__all__ = ["ArtefactRecord", "BuildError", "DEB_CACHE", "Manifest", "PYTHON_CHECK_MODULES", "build_artefacts",
           "check_run", "file_record", "has_ssh_server", "mib"]

#: Where downloaded packages are kept and reused, in the image directory.
DEB_CACHE = ".debs"
#: The standard library modules a root file system's Python must import.
PYTHON_CHECK_MODULES = ("json", "struct", "selectors", "os", "socket", "time", "hashlib", "base64", "tarfile",
                        "subprocess", "pty", "signal", "ctypes")
# Programs whose shared libraries must all be present; a Python extension module without its library
# (say _dbm without libdb) is only reported.
_REQUIRED_PROGRAM_DIRS = ("usr/bin", "usr/sbin")


class BuildError(Exception):
    """
    The image could not be built; the message says which step failed and why.
    """


def mib(size: int) -> str:
    """``size`` bytes in MiB, as the progress lines say it."""
    return f"{size / (1024 * 1024):.1f} MiB"


def check_run(argv: list[str], what: str) -> str:
    """
    Run ``argv`` on the host and return its output.

    :raises BuildError: it failed (the message names ``what``, and holds the command and its output).
    """
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"{what} failed ({result.returncode}): {' '.join(argv)}\n{result.stdout.strip()}")
    return result.stdout


class ArtefactRecord(TypedDict):
    """One file of a build in its manifest: its size in bytes and SHA-256 (hex)."""

    size: int
    sha256: str


class Manifest(TypedDict):
    """What ``manifest.json`` says of a build (see :func:`vmservice.images.build.build_image`)."""

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


def file_record(path: str) -> ArtefactRecord:
    """The size and SHA-256 of the file ``path``, as a manifest records an artefact."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1024 * 1024), b""):
            digest.update(chunk)
    return {"size": os.path.getsize(path), "sha256": digest.hexdigest()}


def build_artefacts(recipe: Recipe, digest: str, source: str, base: str, work: str, output: str,
                    out: Callable[[str], None], run: debian.Runner) -> Manifest:
    """
    Make the artefacts of ``recipe`` in ``output``, its tree in ``work``, and return their manifest.

    :param digest: the recipe hash, which the manifest records.
    :param source: the ``vmservice`` package directory the guest files come from.
    :param base: the image directory (its package cache, :data:`DEB_CACHE`).
    :param out: receives one progress line per step.
    :param run: runs apt and dpkg commands.
    :raises BuildError: if a step fails.
    """
    kernel_package, debs = _fetch(recipe, base, out, run)
    root = os.path.join(work, "root")
    out(f"unpacking {len(debs)} packages")
    try:
        debian.unpack(debs, root, run)
    except debian.AptError as error:
        raise BuildError(f"unpacking packages: {error}") from None
    rootfs.merge_usr(root)
    release = _write_kernel(root, output, kernel_package, out)
    order = _write_initramfs(root, release, recipe, source, output, out)
    _assemble_rootfs(root, recipe, source, out)
    image = os.path.join(output, ROOTFS_FILE)
    try:
        size = rootfs.make_ext4(root, image, recipe.rootfs_headroom_mib)
    except rootfs.RootfsError as error:
        raise BuildError(str(error)) from None
    out(f"rootfs: {mib(size)} ext4 for {mib(rootfs.tree_size(root))} of files")
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
        "artefacts": {file: file_record(os.path.join(output, file))
                      for file in (KERNEL_FILE, INITRD_FILE, ROOTFS_FILE)},
    }


def _fetch(recipe: Recipe, base: str, out: Callable[[str], None], run: debian.Runner
           ) -> tuple[str, list[debian.DebFile]]:
    """The recipe's kernel package and its packages (their dependencies too, if it says so), downloaded."""
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
    return kernel_package, debs


def _write_kernel(root: str, output: str, kernel_package: str, out: Callable[[str], None]) -> str:
    """Write ``vmlinux``, extracted from the tree's bzImage, to ``output``; the kernel's release."""
    release = _kernel_release(root)
    with open(os.path.join(root, "boot", f"vmlinuz-{release}"), "rb") as stream:
        bzimage = stream.read()
    try:
        vmlinux = extract_vmlinux(bzimage)
    except Exception as error:
        raise BuildError(f"extracting vmlinux from {kernel_package}: {error}") from None
    with open(os.path.join(output, KERNEL_FILE), "wb") as stream:
        stream.write(vmlinux)
    out(f"vmlinux: {mib(len(vmlinux))} (kernel {release}, from a {mib(len(bzimage))} bzImage)")
    return release


def _write_initramfs(root: str, release: str, recipe: Recipe, source: str, output: str,
                     out: Callable[[str], None]) -> list[str]:
    """
    Write ``initrd.img`` to ``output``: the tree's busybox, our init and the recipe's kernel modules with
    what they depend on; those modules' paths, in the order they load.
    """
    modules_dir = os.path.join(root, "usr/lib/modules", release)
    check_run(["depmod", "-b", root, release], "depmod")
    order = module_load_order(_read_text(os.path.join(modules_dir, "modules.dep")), recipe.initramfs_modules,
                              _read_text(os.path.join(modules_dir, "modules.builtin")).split())
    busybox = os.path.join(root, "usr/bin/busybox")
    applets = check_run([busybox, "--list"], "busybox --list").split()
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
    out(f"initramfs: {mib(initrd_size)} ({len(modules)} modules: "
        f"{' '.join(path.rsplit('/', 1)[-1][:-3] for path in order)})")
    return order


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
        check_run(["chroot", root, "/usr/sbin/update-ca-certificates", "--fresh"], "update-ca-certificates")
        bundle = os.path.join(root, postinst.CA_BUNDLE)
        if not os.path.isfile(bundle) or os.path.getsize(bundle) == 0:
            raise BuildError(f"update-ca-certificates did not write /{postinst.CA_BUNDLE}")
        out(f"rootfs: /{postinst.CA_BUNDLE} with {certificates} certificates")
    if postinst.secure_sudoers(root):
        out("rootfs: /etc/sudoers 0440")
    stacks = postinst.write_pam_stacks(root)
    if stacks:
        out(f"rootfs: PAM stacks {', '.join(f'common-{stack}' for stack in stacks)}")


def _assemble_rootfs(root: str, recipe: Recipe, source: str, out: Callable[[str], None]) -> None:
    rootfs.prune(root)
    rootfs.add_base_files(root)
    # Before busybox's links, so that a real program gets a name busybox also has (awk).
    alternatives = postinst.install_alternatives(root)
    if alternatives:
        out(f"rootfs: alternatives {', '.join(alternatives)}")
    applets = check_run([os.path.join(root, "usr/bin/busybox"), "--list-full"], "busybox --list-full")
    links = rootfs.install_busybox_links(root, applets.splitlines())
    rootfs.install_guest_files(root, source, guest_sources(source))
    # The guest has no ldconfig (it is in libc-bin); the host's writes the cache for the tree.
    check_run(["ldconfig", "-r", root], "ldconfig -r")
    _maintainer_steps(root, out)
    try:
        accounts = add_accounts(root, recipe.users)
    except AccountError as error:
        raise BuildError(f"making the recipe's accounts: {error}") from None
    if accounts:
        out(f"rootfs: accounts {', '.join(accounts)}")
    missing = rootfs.missing_libraries(root, _REQUIRED_PROGRAM_DIRS)
    if missing:
        raise BuildError("programs lack shared libraries (add their packages to the recipe): "
                         + ", ".join(f"{m.path} needs {m.soname}" for m in missing))
    optional = rootfs.missing_libraries(root, ("usr/lib/python3.11/lib-dynload",))
    if optional:
        out("rootfs: Python extension modules without their libraries (not importable): "
            + ", ".join(sorted({f"{os.path.basename(m.path).split('.')[0]} ({m.soname})" for m in optional})))
    check_run(["chroot", root, "/usr/bin/python3.11", "-I", "-m", "compileall", "-q",
                "--invalidation-mode", "unchecked-hash", "/usr/lib/python3.11"], "compiling the standard library")
    check_run(["chroot", root, "/usr/bin/python3.11", "-I", "-m", "compileall", "-q", "/opt/vmservice"],
               "compiling the guest code")
    check_run(["chroot", root, "/usr/bin/python3.11", "-I", "-S", "-c", "import " + ", ".join(PYTHON_CHECK_MODULES)],
               "importing the standard library in the root file system")
    check_run(["chroot", root, "/bin/bash", "-c", "true"], "running bash in the root file system")
    guest_modules = ["vmservice.guest.powerbutton", "vmservice.guest.rootgrowth", "vmservice.guest.metrics"]
    if os.path.exists(os.path.join(root, "opt/vmservice/vmservice/guest/agent.py")):
        guest_modules.append("vmservice.guest.agent")
    check_run(["chroot", root, "/usr/bin/python3.11", "-I", "-S", "-c",
                "import sys; sys.path.insert(0, '/opt/vmservice'); import " + ", ".join(guest_modules)],
               "importing the guest code in the root file system")
    out(f"rootfs: {links} busybox links, checked bash, python3.11 and {', '.join(guest_modules)}")
