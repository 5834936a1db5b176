# -*- test-case-name: tests.images.test_runtime -*-
"""
Tests for :mod:`vmservice.images.runtime`: the libraries copied for the runtime's programs, the launcher
scripts and ``/etc/vmservice/runtime``. Taking the runtime out of a real default image and running it in
a tree without any C library of its own is tested in :mod:`tests.integration.images.test_oci`.
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from tests.images.elfs import make_elf
from vmservice.images.runtime import (RUNTIME_PYTHON, RUNTIME_SHELL, RuntimeError_, _copy_libraries, _launcher,
                                      runtime_environment)


def write(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as stream:
        stream.write(data)
    return path


class LibraryTests(SynchronousTestCase):
    """
    :func:`_copy_libraries`.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        self.libs = os.path.join(self.base, "libs")
        self.target = os.path.join(self.base, "target")
        os.makedirs(self.target)
        write(os.path.join(self.libs, "libc.so.6"), make_elf(e_type=3))
        write(os.path.join(self.libs, "libz.so.1.2.13"), make_elf(("libc.so.6",), e_type=3))
        os.symlink("libz.so.1.2.13", os.path.join(self.libs, "libz.so.1"))
        write(os.path.join(self.libs, "libssl.so.3"), make_elf(("libcrypto.so.3", "libc.so.6"), e_type=3))
        write(os.path.join(self.libs, "libcrypto.so.3"), make_elf(("libc.so.6",), e_type=3))
        write(os.path.join(self.libs, "unused.so.1"), make_elf(e_type=3))

    def test_closure(self) -> None:
        """
        Every library needed, directly or not, is copied as a regular file named by its soname; nothing
        else is.
        """
        program = write(os.path.join(self.base, "bin/python"), make_elf(("libz.so.1", "libc.so.6")))
        extension = write(os.path.join(self.base, "ext/_ssl.so"), make_elf(("libssl.so.3",), e_type=3))
        self.assertEqual(_copy_libraries([program], [extension], self.libs, self.target), [])
        self.assertEqual(sorted(os.listdir(self.target)), ["libc.so.6", "libcrypto.so.3", "libssl.so.3", "libz.so.1"])
        self.assertFalse(os.path.islink(os.path.join(self.target, "libz.so.1")))

    def test_missing(self) -> None:
        """
        A library missing for an extension module is reported; missing for a program, it is an error.
        """
        program = write(os.path.join(self.base, "bin/python"), make_elf(("libc.so.6",)))
        extension = write(os.path.join(self.base, "ext/nis.so"), make_elf(("libnsl.so.2",), e_type=3))
        self.assertEqual(_copy_libraries([program], [extension], self.libs, self.target), ["libnsl.so.2"])
        broken = write(os.path.join(self.base, "bin/broken"), make_elf(("libnsl.so.2",)))
        self.assertRaises(RuntimeError_, _copy_libraries, [broken], [], self.libs, self.target)


class ScriptTests(SynchronousTestCase):
    """
    The launchers and the environment file.
    """

    def test_launcher(self) -> None:
        """
        A launcher runs its program through the runtime's loader with the runtime's libraries, under the
        runtime's shell; Python's passes ``--argv0`` so that ``sys.executable`` is the launcher.
        """
        script = _launcher("/opt/vmservice/runtime/bin/program").decode()
        self.assertTrue(script.startswith(f"#!{RUNTIME_SHELL}\n"))
        self.assertIn('exec /opt/vmservice/runtime/lib/ld-linux-x86-64.so.2 --library-path /opt/vmservice/runtime/lib '
                      '/opt/vmservice/runtime/bin/program "$@"\n', script)
        self.assertIn(f"--argv0 {RUNTIME_PYTHON} /opt/vmservice/runtime/bin/python3.11 \"$@\"",
                      _launcher("/opt/vmservice/runtime/bin/python3.11", python=True).decode())

    def test_environment(self) -> None:
        """
        ``/etc/vmservice/runtime`` puts the runtime first in PATH and names its Python (shell syntax).
        """
        lines = [line for line in runtime_environment().decode().splitlines() if not line.startswith("#")]
        self.assertEqual(lines, ["export PATH=/opt/vmservice/runtime/bin:$PATH",
                                 f"export VMSERVICE_PYTHON={RUNTIME_PYTHON}"])
