# -*- test-case-name: tests.images.test_imported -*-
"""
Tests for :mod:`vmservice.images.imported` that need no real default image: the inittab, the names
accepted, an import that is up to date and the errors. A real import, booted, is in
:mod:`tests.integration.images.test_oci`.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

import vmservice.images.imported as imported
from tests.images.containers import Entry, layer, oci_layout
from tests.images.fakes import fake_image
from vmservice.images.build import BuildError
from vmservice.images.imported import ImportFailed, import_image, inittab
from vmservice.images.oci import apply_layer
from vmservice.images.store import Image, resolve_image


class InittabTests(SynchronousTestCase):
    """
    :func:`inittab`.
    """

    def test_runtime_shell(self) -> None:
        """
        Every script of the default inittab runs with the runtime's shell.
        """
        lines = [line for line in inittab().decode().splitlines() if not line.startswith("#")]
        self.assertEqual(lines, [
            "::sysinit:/opt/vmservice/runtime/bin/sh /etc/vmservice/rc",
            "::respawn:/opt/vmservice/runtime/bin/sh /opt/vmservice/bin/agent",
            "::respawn:/opt/vmservice/runtime/bin/sh /opt/vmservice/bin/metrics",
            "::ctrlaltdel:/opt/vmservice/runtime/bin/poweroff",
            "::shutdown:/opt/vmservice/runtime/bin/sh /etc/vmservice/shutdown",
        ])


class ImportTests(SynchronousTestCase):
    """
    :func:`import_image` around the work itself, with a fake default image.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        fake_image(os.path.join(self.base, "default-0123456789abcdef"))
        os.symlink("default-0123456789abcdef", os.path.join(self.base, "default"))
        self.lines: list[str] = []
        self.patch(imported, "build_image", self.fake_build)
        self.layout = os.path.join(self.base, "layout")
        self.digest = oci_layout(self.layout, [layer([Entry("file", data=b"x")])])

    def fake_build(self, image_dir: str, name: str, **kwargs: Any) -> Image:
        return resolve_image(image_dir, name)

    def test_bad_names(self) -> None:
        """
        Names that cannot be a directory entry of the image directory, or that belong to a recipe, are
        refused before anything is read.
        """
        for name in ("", ".hidden", "a/b", "sp ace", "x" * 65, "default", "default-0123456789abcdef", "caf\u00e9"):
            self.assertRaises(ImportFailed, import_image, self.base, name, self.layout, out=self.lines.append)

    def test_up_to_date(self) -> None:
        """
        An import of the same image on the same default build is found and linked, not redone.
        """
        digest = hashlib.sha256(b"vmservice-oci-v1\x00" + self.digest.encode() + b"\x00"
                                + b"default-0123456789abcdef").hexdigest()[:16]
        fake_image(os.path.join(self.base, f"app-{digest}"), {"name": "app"})
        image = import_image(self.base, "app", self.layout, out=self.lines.append)
        self.assertEqual(image.path.basename(), f"app-{digest}")
        self.assertEqual(os.readlink(os.path.join(self.base, "app")), f"app-{digest}")
        self.assertIn("up to date", self.lines[-1])

    def test_unreadable(self) -> None:
        """
        A file that is no image is an :class:`ImportFailed` naming it, and nothing is left behind.
        """
        error = self.assertRaises(ImportFailed, import_image, self.base, "app", self.base + "/nothing",
                                  out=self.lines.append)
        self.assertIn("nothing", str(error))
        self.assertEqual(sorted(os.listdir(self.base)), ["default", "default-0123456789abcdef", "layout"])

    def test_default_fails(self) -> None:
        """
        When the default image cannot be built, the import fails saying so.
        """
        def broken(*args: Any, **kwargs: Any) -> Image:
            raise BuildError("no network")

        self.patch(imported, "build_image", broken)
        error = self.assertRaises(ImportFailed, import_image, self.base, "app", self.layout, out=self.lines.append)
        self.assertIn("building the default image first: no network", str(error))


class AssembleTests(SynchronousTestCase):
    """
    :func:`vmservice.images.imported._assemble` on a tree an image left with links and files meant to take
    the import's writes, or its programs run in the tree, out onto the host; the runtime and the programs
    are fakes (no default image, no ``chroot``).
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        self.root = os.path.join(self.base, "root")
        self.host = os.path.join(self.base, "host")
        os.makedirs(self.root)
        os.makedirs(self.host)
        fake_image(os.path.join(self.base, "default-0123456789abcdef"))
        self.image = resolve_image(self.base, "default-0123456789abcdef")
        self.runtime_saw: list[bool] = []
        self.ran: list[tuple[list[str], dict[str, str] | None, bool]] = []
        self.patch(imported, "install_runtime", self.fake_runtime)
        self.patch(imported.subprocess, "run", self.fake_run)

    def fake_runtime(self, root: str, base_rootfs: str) -> list[str]:
        # What the real one writes into /etc/vmservice: is it still the image's link there?
        self.runtime_saw.append(os.path.islink(os.path.join(root, "etc/vmservice/runtime")))
        return []

    def fake_run(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.ran.append((argv, kwargs.get("env"), os.path.lexists(os.path.join(self.root, "etc/ld.so.preload"))))
        return subprocess.CompletedProcess(argv, 0, "")

    def apply(self, *entries: Entry) -> None:
        apply_layer(io.BytesIO(layer(entries)), self.root)

    def host_files(self) -> list[str]:
        return sorted(os.path.relpath(os.path.join(top, name), self.host)
                      for top, _dirs, files in os.walk(self.host) for name in files)

    def test_links_in_our_directories(self) -> None:
        """
        Links an image left in ``/opt/vmservice`` and ``/etc/vmservice`` (absolute, to host directories and
        files) take none of the import's writes out of the tree: before, the guest code was written into the
        host directory ``opt/vmservice/vmservice`` named, and the runtime's environment over the host file
        ``etc/vmservice/runtime`` named.
        """
        with open(os.path.join(self.host, "passwd"), "w") as stream:
            stream.write("host\n")
        self.apply(Entry("opt/vmservice", "dir", mode=0o755), Entry("opt/vmservice/vmservice", "symlink", target=self.host),
                   Entry("etc/vmservice", "dir", mode=0o755),
                   Entry("etc/vmservice/runtime", "symlink", target=os.path.join(self.host, "passwd")),
                   Entry("etc/vmservice/rc", "symlink", target=os.path.join(self.host, "passwd")))
        imported._assemble(self.root, self.image, lambda line: None)
        self.assertEqual(self.host_files(), ["passwd"])
        with open(os.path.join(self.host, "passwd")) as stream:
            self.assertEqual(stream.read(), "host\n")
        self.assertEqual(self.runtime_saw, [False])
        self.assertFalse(os.path.islink(os.path.join(self.root, "opt/vmservice/vmservice")))
        self.assertTrue(os.path.isfile(os.path.join(self.root, "opt/vmservice/vmservice/guest/agent.py")))

    def test_loader_preload_aside(self) -> None:
        """
        Our programs run in the tree without the image's ``/etc/ld.so.preload`` (the loader would load the
        image's library into them, as root on the host) and with an environment of ours; the file is back
        afterwards, for the guest.
        """
        self.apply(Entry("etc/ld.so.preload", data=b"/lib/evil.so\n"), Entry("lib/evil.so", data=b"\x7fELF"))
        self.patch(os, "environ", {**os.environ, "LD_PRELOAD": "/lib/evil.so", "LANG": "xx_XX.UTF-8"})
        imported._assemble(self.root, self.image, lambda line: None)
        self.assertEqual(len(self.ran), 3)
        for argv, env, preload in self.ran:
            self.assertEqual((os.path.basename(argv[0]), argv[1]), ("chroot", self.root))
            self.assertTrue(os.path.isabs(argv[0]), argv)
            self.assertFalse(preload, argv)
            self.assertEqual(env, {"PATH": "/opt/vmservice/runtime/bin", "LC_ALL": "C"})
        with open(os.path.join(self.root, "etc/ld.so.preload"), "rb") as stream:
            self.assertEqual(stream.read(), b"/lib/evil.so\n")

    def test_host_keys_removed(self) -> None:
        """
        The SSH host keys an image was built with are removed (every node would share them); the rest of
        ``/etc/ssh`` stays.
        """
        self.apply(*(Entry(f"etc/ssh/ssh_host_{kind}_key{suffix}", data=b"key", mode=0o600)
                     for kind in ("rsa", "ecdsa", "ed25519") for suffix in ("", ".pub")),
                   Entry("etc/ssh/sshd_config", data=b"Port 22\n"), Entry("etc/ssh/moduli", data=b"m"))
        imported._assemble(self.root, self.image, lambda line: None)
        self.assertEqual(sorted(os.listdir(os.path.join(self.root, "etc/ssh"))), ["moduli", "sshd_config"])
