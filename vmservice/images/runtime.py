# -*- test-case-name: tests.images.test_runtime,tests.integration.images.test_oci -*-
"""
The runtime an imported image's guest code runs on, whatever the image holds: ``/opt/vmservice/runtime``.

An image made from someone's container image may have no shell, no Python, or a C library of another kind
or version (musl, an older glibc). Our init scripts and agent must not depend on any of it, so the import
brings its own, taken from the default image's root file system (read with ``debugfs``, no mount needed):

- ``bin/busybox`` (static) with a link per applet: ``sh`` runs our init scripts, and ``mount``, ``ip``,
  ``hostname``, ``poweroff``... do their work;
- ``bin/python3.11`` with its standard library in ``lib/python3.11`` and every shared library it and its
  extension modules need, with the dynamic loader, in ``lib/``.

No file system tools: the guest agent grows the root file system itself (one ioctl,
:mod:`vmservice.guest.rootgrowth`).

Programs are started through the loader, ``lib/ld-linux-x86-64.so.2 --library-path lib PROGRAM``, so the
image's own ``/lib64/ld-linux-x86-64.so.2``, ``/etc/ld.so.cache`` and libraries never come into play. A small
script, ``bin/python3``, does that, run by the busybox ``sh``; it also passes ``--argv0`` so that
``sys.executable`` is the script, and a Python child of the agent starts the same way. ``/etc/vmservice/runtime`` (shell) puts ``bin/`` first in ``PATH`` of our
scripts and names the Python to use (``VMSERVICE_PYTHON``); our launchers read it when it exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from vmservice.images.elf import ElfError, parse_elf

__all__ = ["RUNTIME_DIR", "RUNTIME_ENVIRONMENT", "RUNTIME_PYTHON", "RUNTIME_SHELL", "RuntimeError_",
           "install_runtime", "runtime_environment"]

#: Where the runtime lives in the guest.
RUNTIME_DIR = "/opt/vmservice/runtime"
#: The shell the runtime brings (busybox).
RUNTIME_SHELL = f"{RUNTIME_DIR}/bin/sh"
#: The runtime's Python (a script running the interpreter through the runtime's loader).
RUNTIME_PYTHON = f"{RUNTIME_DIR}/bin/python3"
#: The file our guest scripts read, when it exists, to use the runtime.
RUNTIME_ENVIRONMENT = "/etc/vmservice/runtime"

_LOADER = "ld-linux-x86-64.so.2"
_PYTHON = "python3.11"


class RuntimeError_(Exception):
    """
    The runtime cannot be taken from the default image (a file is missing from it, or ``debugfs`` failed).
    """


def _debugfs_dump(image: str, sources: list[str], target: str) -> None:
    os.makedirs(target, exist_ok=True)
    request = "rdump " + " ".join(sources) + " " + target
    result = subprocess.run(["debugfs", "-R", request, image], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, check=False)
    missing = [source for source in sources if not os.path.lexists(os.path.join(target, os.path.basename(source)))]
    if result.returncode != 0 or missing:
        raise RuntimeError_(f"debugfs could not copy {', '.join(missing) or sources} out of {image}: "
                            f"{result.stdout.strip()}")


def _needed(path: str) -> tuple[str, ...]:
    with open(path, "rb") as stream:
        data = stream.read()
    if data[:4] != b"\x7fELF":
        return ()
    try:
        return parse_elf(data).needed
    except ElfError:
        return ()


def _copy_libraries(programs: list[str], optional: list[str], library_dir: str, target: str) -> list[str]:
    """
    Copy every library ``programs`` and ``optional`` need, transitively, from ``library_dir`` to
    ``target`` (as regular files named by soname); return the sonames that ``optional`` files lack.
    """
    missing: list[str] = []
    queue = [(path, False) for path in programs] + [(path, True) for path in optional]
    seen: set[str] = set()
    while queue:
        path, is_optional = queue.pop(0)
        for soname in _needed(path):
            if soname in seen:
                continue
            found = os.path.join(library_dir, soname)
            if not os.path.exists(found):
                if not is_optional:
                    raise RuntimeError_(f"{os.path.basename(path)} needs {soname}, which the default image lacks")
                missing.append(soname)
                continue
            seen.add(soname)
            copy = os.path.join(target, soname)
            shutil.copyfile(os.path.realpath(found), copy)
            os.chmod(copy, 0o755)
            queue.append((copy, is_optional))
    return sorted(set(missing))


def _launcher(program: str, python: bool = False) -> bytes:
    argv0 = f"--argv0 {RUNTIME_PYTHON} " if python else ""
    return (f"#!{RUNTIME_SHELL}\n"
            f"# Runs {program} with the runtime's own loader and libraries (see vmservice/images/runtime.py).\n"
            f"exec {RUNTIME_DIR}/lib/{_LOADER} --library-path {RUNTIME_DIR}/lib {argv0}{program} \"$@\"\n").encode()


def runtime_environment() -> bytes:
    """The content of ``/etc/vmservice/runtime``."""
    return (b"# Written by the image import: the guest's own scripts and agent use /opt/vmservice/runtime,\n"
            b"# not the image's shell and Python (see vmservice/images/runtime.py).\n"
            + f"export PATH={RUNTIME_DIR}/bin:$PATH\n".encode()
            + f"export VMSERVICE_PYTHON={RUNTIME_PYTHON}\n".encode())


def _write(path: str, data: bytes, mode: int) -> None:
    with open(path, "wb") as stream:
        stream.write(data)
    os.chmod(path, mode)


def install_runtime(root: str, base_rootfs: str) -> list[str]:
    """
    Put the runtime into the tree ``root`` (below ``opt/vmservice/runtime``, replacing any there) and write
    ``etc/vmservice/runtime``, taking its files from ``base_rootfs``, the default image's ``rootfs.ext4``.

    :return: the libraries some Python extension modules need and the default image lacks (those modules
        cannot be imported in the guest, as in the default image).
    :raises RuntimeError_: if a file is missing from the default image.
    """
    target = os.path.join(root, RUNTIME_DIR.lstrip("/"))
    if os.path.lexists(target):
        shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.unlink(target)
    for sub in ("bin", "lib"):
        os.makedirs(os.path.join(target, sub))
    with tempfile.TemporaryDirectory(prefix="vmservice-runtime-") as work:
        _debugfs_dump(base_rootfs, [f"/usr/lib/{_PYTHON}"], os.path.join(work, "stdlib"))
        _debugfs_dump(base_rootfs, ["/usr/lib/x86_64-linux-gnu"], os.path.join(work, "libs"))
        _debugfs_dump(base_rootfs, ["/usr/bin/busybox", f"/usr/bin/{_PYTHON}"], os.path.join(work, "bin"))
        libraries = os.path.join(work, "libs", "x86_64-linux-gnu")
        stdlib = os.path.join(target, "lib", _PYTHON)
        shutil.copytree(os.path.join(work, "stdlib", _PYTHON), stdlib, symlinks=True)
        for name in ("EXTERNALLY-MANAGED", "__phello__", "ensurepip", "idlelib", "lib2to3", "pydoc_data",
                     "tkinter", "turtledemo"):
            path = os.path.join(stdlib, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.unlink(path)
        shutil.copyfile(os.path.join(work, "bin", "busybox"), os.path.join(target, "bin", "busybox"))
        os.chmod(os.path.join(target, "bin", "busybox"), 0o755)
        python = os.path.join(target, "bin", _PYTHON)
        shutil.copyfile(os.path.join(work, "bin", _PYTHON), python)
        os.chmod(python, 0o755)
        loader = os.path.join(target, "lib", _LOADER)
        shutil.copyfile(os.path.realpath(os.path.join(libraries, _LOADER)), loader)
        os.chmod(loader, 0o755)
        dynload = os.path.join(stdlib, "lib-dynload")
        extensions = [os.path.join(dynload, name) for name in sorted(os.listdir(dynload)) if name.endswith(".so")]
        missing = _copy_libraries([python], extensions, libraries, os.path.join(target, "lib"))
        applets = subprocess.run([os.path.join(target, "bin", "busybox"), "--list"], stdout=subprocess.PIPE,
                                 text=True, check=True).stdout.split()
    for applet in applets:
        if applet and "/" not in applet and applet != "busybox":
            os.symlink("busybox", os.path.join(target, "bin", applet))
    _write(os.path.join(target, "bin", "python3"), _launcher(f"{RUNTIME_DIR}/bin/{_PYTHON}", python=True), 0o755)
    environment = os.path.join(root, RUNTIME_ENVIRONMENT.lstrip("/"))
    os.makedirs(os.path.dirname(environment), exist_ok=True)
    _write(environment, runtime_environment(), 0o644)
    return missing
