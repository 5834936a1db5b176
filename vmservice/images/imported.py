# -*- test-case-name: tests.images.test_imported,tests.integration.images.test_oci -*-
"""
Importing a container image as a guest image: ``python -m vmservice.images import NAME FILE``.

The container image (an OCI layout or a ``docker save`` tar file, see :mod:`vmservice.images.oci`) gives
the root file system; the rest comes from the default image, built first if needed:

- ``vmlinux`` and ``initrd.img`` are the default image's (the initramfs holds every kernel module a guest
  loads, so the root file system needs no ``/lib/modules``);
- our guest files are added as in a recipe build (:func:`vmservice.images.rootfs.install_guest_files`),
  with an ``/etc/inittab`` that runs them with the runtime's shell, ``/sbin/init`` becomes busybox init,
  and the runtime (:mod:`vmservice.images.runtime`) goes to ``/opt/vmservice/runtime``: a busybox and a
  Python 3.11 of our own, so the image needs neither a shell nor Python nor any particular C library;
- the mount points and, when the image has none, ``/etc/passwd`` and ``/etc/group`` with ``root``;
- the image's SSH host keys (``/etc/ssh/ssh_host_*``) are removed: every node of the image would share
  them; each node's guest makes its own when its SSH server first starts (:mod:`vmservice.guest.login`).

The tree is the image's, so nothing of it is trusted on the host: ``/etc/vmservice`` and ``/opt/vmservice``
are replaced by fresh directories before our files go in (a link left there would take a write out of the
tree), and our programs run in it (``chroot``) with an environment of ours and without the image's
``/etc/ld.so.preload``.

The result lands in the image directory like a recipe build: ``<NAME>-<digest>/`` holding ``vmlinux``,
``initrd.img``, ``rootfs.ext4`` and ``manifest.json``, and the link ``<NAME>``. The digest covers the
container image's manifest and the default build it was combined with, so importing the same image again
is a no-op until our guest code changes. The container's entry point, command, environment and user are
recorded in the manifest but not used: a node runs our init and agent, and ``exec`` runs what it is told.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import time
from typing import Callable

from twisted.python.filepath import FilePath

from vmservice.images import rootfs
from vmservice.images.artefacts import file_record
from vmservice.images.build import BuildError, _locked, build_image, prune_builds, publish, up_to_date
from vmservice.images.oci import ContainerImage, ImageSource, OciError, apply_layer, open_source, resolve_inside
from vmservice.images.recipe import RecipeError, guest_sources, load_recipe, package_root
from vmservice.images.runtime import RUNTIME_DIR, RUNTIME_SHELL, RuntimeError_, install_runtime
from vmservice.images.store import (INITRD_FILE, KERNEL_FILE, ROOTFS_FILE, Image,
                                    resolve_image)

__all__ = ["BASE_IMAGE", "ImportFailed", "import_image", "inittab"]

#: The image whose kernel, initramfs and runtime an imported image uses.
BASE_IMAGE = "default"
#: Free space in ``rootfs.ext4`` beyond its content (the guest grows it to its disk at boot).
HEADROOM_MIB = 64

# Directories that our files go into: made real directories when the image has symbolic links there.
_OUR_DIRECTORIES = ("etc", "etc/vmservice", "opt", "opt/vmservice", "opt/vmservice/bin")
# Directories wholly ours: whatever the image has there is removed first, so that no symbolic link it left
# inside (``opt/vmservice/vmservice -> /root``, ``etc/vmservice/runtime -> /etc/passwd``) takes one of our
# writes out of the tree onto the host.
_OUR_TREES = ("etc/vmservice", "opt/vmservice")
# The files the dynamic loader reads whatever its command line says: moved aside while our programs run in
# the tree on the host (an image's ``/etc/ld.so.preload`` would load its library into them, as root).
_LOADER_FILES = ("etc/ld.so.preload",)
# The environment of our programs run in the tree: nothing of the importing shell's (``LD_PRELOAD``, a
# locale whose files the image would provide).
_CHECK_ENVIRONMENT = {"PATH": f"{RUNTIME_DIR}/bin", "LC_ALL": "C"}


class ImportFailed(Exception):
    """
    The container image cannot be imported; the message says why.
    """


def inittab() -> bytes:
    """
    ``/etc/inittab`` of an imported image: the default one's entries, each script run by the runtime's
    shell (the image's ``/bin/sh`` may be missing or not a POSIX shell).
    """
    return (b"# /etc/inittab of an imported vmservice image (busybox init): our scripts run with the shell\n"
            b"# of /opt/vmservice/runtime, not the image's own.\n"
            + f"::sysinit:{RUNTIME_SHELL} /etc/vmservice/rc\n".encode()
            + f"::respawn:{RUNTIME_SHELL} /opt/vmservice/bin/agent\n".encode()
            + f"::respawn:{RUNTIME_SHELL} /opt/vmservice/bin/metrics\n".encode()
            + f"::ctrlaltdel:{RUNTIME_DIR}/bin/poweroff\n".encode()
            + f"::shutdown:{RUNTIME_SHELL} /etc/vmservice/shutdown\n".encode())


def _validate_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or len(name) > 64 or not all(
            c.isascii() and (c.isalnum() or c in "-_.") for c in name):
        raise ImportFailed(f"bad image name {name!r}: letters, digits, '-', '_' and '.', not starting with '.'")
    prefix, _, suffix = name.rpartition("-")
    if prefix and len(suffix) == 16 and all(c in "0123456789abcdef" for c in suffix):
        raise ImportFailed(f"bad image name {name!r}: it looks like the directory of a build")
    try:
        load_recipe(name)
    except RecipeError:
        return
    raise ImportFailed(f"{name!r} is the name of a recipe image; import under another name")


def _real_directory(root: str, relative: str, empty: bool = False) -> str:
    """
    Make ``relative`` a real directory of the tree (replacing a symbolic link or file); its host path.
    Its parents must be real directories already.

    :param empty: remove what the image has there first.
    """
    path = os.path.join(root, relative)
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    elif empty and os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path, exist_ok=True)
    return path


def _run_checks(root: str, checks: list[tuple[list[str], str]]) -> None:
    """
    Run each ``(argv, what)`` in the tree (``chroot``, as root on the host), with
    :data:`_CHECK_ENVIRONMENT` and the image's :data:`_LOADER_FILES` moved aside meanwhile.

    :raises ImportFailed: when one fails.
    """
    # Found with the host's PATH: subprocess looks a program up in the PATH of the environment it is given.
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    aside = []
    try:
        for relative in _LOADER_FILES:
            path = os.path.join(root, relative)
            if os.path.lexists(path):
                os.rename(path, f"{path}.vmservice-import")
                aside.append(path)
        for argv, what in checks:
            result = subprocess.run([chroot, root, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, check=False, env=_CHECK_ENVIRONMENT)
            if result.returncode != 0:
                raise ImportFailed(f"{what} in the imported tree failed ({result.returncode}): "
                                   f"{result.stdout.strip()}")
    finally:
        for path in aside:
            os.rename(f"{path}.vmservice-import", path)


def _assemble(root: str, base: Image, out: Callable[[str], None]) -> bool:
    """Add what a guest needs to the unpacked tree; return whether it has an SSH server."""
    _add_base_files(root)
    _add_guest_files(root, base, out)
    return _check_tree(root, out)


def _add_base_files(root: str) -> None:
    """
    Our directories (real ones), the base directories, ``/etc/passwd``, ``group`` and ``hostname`` when
    the image has none, no SSH host keys, ``/etc/mtab`` and the console and null devices.
    """
    for relative in _OUR_DIRECTORIES:
        _real_directory(root, relative, empty=relative in _OUR_TREES)
    for relative, mode in rootfs.BASE_DIRECTORIES.items():
        path = resolve_inside(root, relative)
        if not os.path.isdir(path):
            if os.path.lexists(path):
                os.unlink(path)
            os.makedirs(path)
            os.chmod(path, mode)
    etc = os.path.join(root, "etc")
    defaults = {
        "passwd": b"root:x:0:0:root:/root:/bin/sh\n",
        "group": b"root:x:0:\ntty:x:5:\n",
        "hostname": b"localhost\n",
    }
    for name, data in defaults.items():
        path = os.path.join(etc, name)
        if not os.path.lexists(path):
            with open(path, "wb") as stream:
                stream.write(data)
            os.chmod(path, 0o644)
    ssh = resolve_inside(root, "etc/ssh")
    if os.path.isdir(ssh):
        for name in os.listdir(ssh):
            if name.startswith("ssh_host_") and (name.endswith("_key") or name.endswith("_key.pub")):
                path = os.path.join(ssh, name)
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
    mtab = os.path.join(etc, "mtab")
    if os.path.lexists(mtab) and not os.path.islink(mtab):
        os.unlink(mtab)
    if not os.path.lexists(mtab):
        os.symlink("../proc/self/mounts", mtab)
    for name, major, minor, mode in (("console", 5, 1, 0o600), ("null", 1, 3, 0o666)):
        node = os.path.join(resolve_inside(root, "dev"), name)
        if not os.path.lexists(node):
            os.mknod(node, stat.S_IFCHR | mode, os.makedev(major, minor))


def _add_guest_files(root: str, base: Image, out: Callable[[str], None]) -> None:
    """Our guest files, the ``/etc/inittab`` that runs them, the runtime (``base``'s), ``/sbin/init``: busybox."""
    source = package_root()
    rootfs.install_guest_files(root, source, guest_sources(source))
    with open(os.path.join(root, "etc", "inittab"), "wb") as stream:
        stream.write(inittab())
    missing = install_runtime(root, base.rootfs.path)
    if missing:
        out(f"runtime: Python extension modules without their libraries: {', '.join(missing)}")
    init = resolve_inside(root, "sbin/init", follow_last=False)
    os.makedirs(os.path.dirname(init), exist_ok=True)
    if os.path.lexists(init):
        shutil.rmtree(init) if os.path.isdir(init) and not os.path.islink(init) else os.unlink(init)
    os.symlink(f"{RUNTIME_DIR}/bin/busybox", init)


def _check_tree(root: str, out: Callable[[str], None]) -> bool:
    """Compile and import the guest code and run the runtime's shell in the tree; whether it has an SSH server."""
    python = f"{RUNTIME_DIR}/bin/python3"
    _run_checks(root, [
        ([python, "-I", "-m", "compileall", "-q", "/opt/vmservice"], "compiling the guest code"),
        ([python, "-I", "-S", "-c", "import sys; sys.path.insert(0, '/opt/vmservice'); "
          "import vmservice.guest.agent, vmservice.guest.powerbutton, vmservice.guest.rootgrowth, "
          "vmservice.guest.metrics"],
         "importing the guest code"),
        ([RUNTIME_SHELL, "-c", "true"], "running the runtime's shell")])
    sshd = resolve_inside(root, "usr/sbin/sshd")
    ssh_server = os.path.isfile(sshd) and os.access(sshd, os.X_OK)
    out(f"rootfs: added the guest files and the runtime; checked Python and sh; SSH server: "
        f"{'yes' if ssh_server else 'no'}")
    return ssh_server


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _config_summary(image: ContainerImage) -> dict[str, object]:
    config = image.config.get("config")
    details = config if isinstance(config, dict) else {}
    summary = {key: details[key] for key in ("Entrypoint", "Cmd", "Env", "User", "WorkingDir") if key in details}
    if "created" in image.config:
        summary["created"] = image.config["created"]
    return summary


def import_image(image_dir: str | FilePath[str], name: str, path: str, *, ref: str = "", force: bool = False,
                 out: Callable[[str], None] = print) -> Image:
    """
    Import the container image at ``path`` as guest image ``name`` into ``image_dir``, unless an import
    of the same image on the same default build is already there.

    :param ref: picks one image when ``path`` holds several (a ref name or tag).
    :param force: import again even if up to date.
    :param out: receives one progress line per step.
    :return: the image, as :func:`vmservice.images.store.resolve_image` finds it afterwards.
    :raises ImportFailed: if the name is taken by a recipe or invalid, the file cannot be read or applied,
        or the default image cannot be built.
    """
    started = time.monotonic()
    _validate_name(name)
    base_dir = os.path.abspath(image_dir.path if isinstance(image_dir, FilePath) else os.fspath(image_dir))
    try:
        base = build_image(base_dir, BASE_IMAGE, out=out)
    except (BuildError, RecipeError) as error:
        raise ImportFailed(f"building the {BASE_IMAGE} image first: {error}") from None
    try:
        source, container = open_source(path, ref)
    except OciError as error:
        raise ImportFailed(str(error)) from None
    try:
        digest = hashlib.sha256(b"vmservice-oci-v1\x00" + container.digest.encode() + b"\x00"
                                + base.path.basename().encode()).hexdigest()[:16]
        final_name = f"{name}-{digest}"
        final = os.path.join(base_dir, final_name)
        with _locked(base_dir, name):
            if os.path.isdir(final) and not force:
                return up_to_date(base_dir, name, final_name, out)
            out(f"image {name}: importing {container.digest} ({len(container.layers)} layers) from {path}")
            work = tempfile.mkdtemp(prefix=f".import-{name}-", dir=base_dir)
            try:
                manifest = _import(source, container, base, work, out)
                manifest["name"] = name
                manifest["source"] = f"oci:{os.path.abspath(path)}" + (f":{container.ref}" if container.ref else "")
                manifest["build_seconds"] = round(time.monotonic() - started, 1)
                publish(base_dir, name, final_name, os.path.join(work, "image"), work, manifest)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            for removed in prune_builds(base_dir, name):
                out(f"removed old build {removed}")
    finally:
        source.close()
    out(f"done in {manifest['build_seconds']} s: {final}")
    return resolve_image(base_dir, name)


def _import(source: ImageSource, container: ContainerImage, base: Image, work: str,
            out: Callable[[str], None]) -> dict[str, object]:
    root = os.path.join(work, "root")
    output = os.path.join(work, "image")
    os.mkdir(root)
    os.mkdir(output)
    try:
        for number, layer in enumerate(container.layers, 1):
            with source.open(layer) as stream:
                count = apply_layer(stream, root)
            out(f"layer {number}/{len(container.layers)}: {count} entries")
        ssh_server = _assemble(root, base, out)
        size = rootfs.make_ext4(root, os.path.join(output, ROOTFS_FILE), HEADROOM_MIB)
    except (OciError, RuntimeError_, rootfs.RootfsError, OSError) as error:
        raise ImportFailed(str(error)) from None
    out(f"rootfs: {size / (1024 * 1024):.1f} MiB ext4 for {rootfs.tree_size(root) / (1024 * 1024):.1f} MiB of files")
    _link_or_copy(base.kernel.path, os.path.join(output, KERNEL_FILE))
    _link_or_copy(base.initrd.path, os.path.join(output, INITRD_FILE))
    return {
        "base_image": base.path.basename(),
        "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "oci_digest": container.digest,
        "oci_config": _config_summary(container),
        "kernel_release": base.manifest.get("kernel_release"),
        "initramfs_modules": base.manifest.get("initramfs_modules"),
        "ssh_server": ssh_server,
        "runtime": RUNTIME_DIR,
        "artefacts": {file: file_record(os.path.join(output, file))
                      for file in (KERNEL_FILE, INITRD_FILE, ROOTFS_FILE)},
    }
