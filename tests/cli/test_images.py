# -*- test-case-name: tests.cli.test_images -*-
"""
Tests for :mod:`vmservice.cli.images`: ``vmctl image build`` and ``import`` with the
builder and the importer replaced.
"""

from __future__ import annotations

import io
import os
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from vmservice.cli.main import run


class ImageBuildTests(SynchronousTestCase):
    def test_build(self) -> None:
        """image build calls the builder with the directory, name and force flag and prints its progress."""
        import vmservice.images.build as build

        calls: list[tuple[Any, ...]] = []

        def fake_build(image_dir: str, name: str = "default", force: bool = False, out: Any = print) -> None:
            calls.append((image_dir, name, force))
            out("image x: built")

        self.patch(build, "build_image", fake_build)
        out, err = io.StringIO(), io.StringIO()
        code = self.successResultOf(Deferred.fromCoroutine(
            run(None, ["image", "build", "--image-dir", "/tmp/imgs", "--name", "x", "--force"], out, err, {})
        ))
        self.assertEqual((code, out.getvalue(), err.getvalue()), (0, "image x: built\n", ""))
        self.assertEqual(calls, [("/tmp/imgs", "x", True)])

    def test_name(self) -> None:
        """The image is named by NAME or --name (default: default); two different names are a failure."""
        import vmservice.images.build as build

        names: list[str] = []

        def fake_build(image_dir: str, name: str = "default", force: bool = False, out: Any = print) -> None:
            names.append(name)

        self.patch(build, "build_image", fake_build)
        for argv in (["image", "build", "dev"], ["image", "build"], ["image", "build", "dev", "--name", "dev"]):
            code = self.successResultOf(Deferred.fromCoroutine(run(None, argv, io.StringIO(), io.StringIO(), {})))
            self.assertEqual(code, 0)
        self.assertEqual(names, ["dev", "default", "dev"])
        err = io.StringIO()
        code = self.successResultOf(Deferred.fromCoroutine(
            run(None, ["image", "build", "dev", "--name", "default"], io.StringIO(), err, {})))
        self.assertEqual(code, 1)
        self.assertIn("two image names", err.getvalue())

    def test_default_dir_and_failure(self) -> None:
        """Without --image-dir the store's default is used; a BuildError prints one line and exits 1."""
        import vmservice.images.build as build
        from vmservice.images.store import default_image_dir

        seen: list[str] = []

        def failing(image_dir: str, name: str = "default", force: bool = False, out: Any = print) -> None:
            seen.append(image_dir)
            raise build.BuildError("apt failed")

        self.patch(build, "build_image", failing)
        out, err = io.StringIO(), io.StringIO()
        code = self.successResultOf(Deferred.fromCoroutine(run(None, ["image", "build"], out, err, {})))
        self.assertEqual((code, err.getvalue()), (1, "vmctl: apt failed\n"))
        self.assertEqual(seen, [default_image_dir()])
        self.assertTrue(os.path.isabs(seen[0]))

    def test_import(self) -> None:
        """image import calls the importer with its arguments and prints its progress; a failure exits 1."""
        import vmservice.images.imported as imported

        calls: list[tuple[Any, ...]] = []

        def fake_import(image_dir: str, name: str, path: str, ref: str = "", force: bool = False,
                        out: Any = print) -> None:
            calls.append((image_dir, name, path, ref, force))
            if name == "broken":
                raise imported.ImportFailed("no linux/amd64 image")
            out("image app: imported")

        self.patch(imported, "import_image", fake_import)
        out, err = io.StringIO(), io.StringIO()
        code = self.successResultOf(Deferred.fromCoroutine(
            run(None, ["image", "import", "--image-dir", "/tmp/imgs", "--ref", "1.0", "app", "app.tar"], out, err, {})
        ))
        self.assertEqual((code, out.getvalue(), err.getvalue()), (0, "image app: imported\n", ""))
        code = self.successResultOf(Deferred.fromCoroutine(run(None, ["image", "import", "broken", "x"], out, err, {})))
        self.assertEqual((code, err.getvalue()), (1, "vmctl: no linux/amd64 image\n"))
        self.assertEqual(calls[0], ("/tmp/imgs", "app", "app.tar", "1.0", False))
