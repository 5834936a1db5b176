# -*- test-case-name: tests.images.test_imported -*-
"""
Tests for :mod:`vmservice.images.imported` that need no real default image: the inittab, the names
accepted, an import that is up to date and the errors. A real import, booted, is in
:mod:`tests.integration.images.test_oci`.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

import vmservice.images.imported as imported
from tests.images.containers import Entry, layer, oci_layout
from tests.images.test_store import fake_image
from vmservice.images.build import BuildError
from vmservice.images.imported import ImportFailed, import_image, inittab
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
