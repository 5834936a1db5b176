# -*- test-case-name: tests.images.test_main -*-
"""
Tests for :mod:`vmservice.images.__main__`, the ``python -m vmservice.images`` command line: its
arguments, what ``build`` and ``show`` print, and its exit statuses.  Nothing is fetched or built: builds
find an up-to-date image, or :func:`~vmservice.images.build.build_image` is replaced by a recorder.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

import vmservice.images.__main__ as cli
from tests.images.fakes import fake_image, refuse
from vmservice.images.__main__ import main
from vmservice.images.build import BuildError, build_image
from vmservice.images.imported import ImportFailed
from vmservice.images.recipe import RecipeError, load_recipe, recipe_hash
from vmservice.images.store import DEFAULT_IMAGE_DIR, IMAGE_DIR_VARIABLE


class UpToDateTests(SynchronousTestCase):
    """
    The command line on an image directory holding a build of the current recipe.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        self.current = f"default-{recipe_hash(load_recipe('default'))}"
        fake_image(os.path.join(self.base, self.current))

    def test_command_line(self) -> None:
        """
        ``build`` exits 0 on an up-to-date image and ``show`` prints its manifest and path.
        """
        out = io.StringIO()
        self.patch(sys, "stdout", out)
        self.patch(os, "environ", {**os.environ, "VMSERVICE_IMAGE_DIR": self.base})
        self.patch(cli, "build_image", lambda *a, **k: build_image(*a, **{**k, "run": refuse}))
        self.assertEqual(main(["build"]), 0)
        self.assertIn("up to date", out.getvalue())
        self.assertEqual(main(["show", "--image-dir", self.base]), 0)
        self.assertIn('"recipe_hash": "0123456789abcdef"', out.getvalue())
        self.assertIn(os.path.join(self.base, self.current), out.getvalue())

    def test_missing_image_exit_status(self) -> None:
        """
        ``show`` on a directory without the image prints an error and exits 1.
        """
        err = io.StringIO()
        self.patch(sys, "stderr", err)
        self.assertEqual(main(["show", "--image-dir", os.path.abspath(self.mktemp())]), 1)
        self.assertIn("not found", err.getvalue())


class ArgumentTests(SynchronousTestCase):
    """
    How the arguments reach :func:`~vmservice.images.build.build_image`, with a recorder in its place.
    """

    def setUp(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.out = io.StringIO()
        self.err = io.StringIO()
        self.patch(sys, "stdout", self.out)
        self.patch(sys, "stderr", self.err)

    def record(self, *args: Any, **kwargs: Any) -> None:
        """Stands in for build_image: records its arguments, prints one progress line through ``out``."""
        self.calls.append((args, kwargs))
        kwargs["out"]("image: recorded")

    def test_build_arguments(self) -> None:
        """``build --image-dir D --name N --force`` builds N into D, forced, printing progress on stdout."""
        self.patch(cli, "build_image", self.record)
        self.assertEqual(main(["build", "--image-dir", "/images", "--name", "tiny", "--force"]), 0)
        [(args, kwargs)] = self.calls
        self.assertEqual(args, ("/images", "tiny"))
        self.assertEqual(kwargs["force"], True)
        self.assertEqual(self.out.getvalue(), "image: recorded\n")

    def test_build_defaults(self) -> None:
        """Without options, ``build`` builds ``default``, unforced, into ``$VMSERVICE_IMAGE_DIR``."""
        self.patch(cli, "build_image", self.record)
        self.patch(os, "environ", {**os.environ, IMAGE_DIR_VARIABLE: "/from/environment"})
        self.assertEqual(main(["build"]), 0)
        [(args, kwargs)] = self.calls
        self.assertEqual((args, kwargs["force"]), (("/from/environment", "default"), False))

    def test_default_image_dir(self) -> None:
        """Without ``--image-dir`` nor the variable, images live in /var/cache/vmservice/images."""
        self.patch(cli, "build_image", self.record)
        self.patch(os, "environ", {k: v for k, v in os.environ.items() if k != IMAGE_DIR_VARIABLE})
        self.assertEqual(main(["build"]), 0)
        self.assertEqual(self.calls[0][0][0], DEFAULT_IMAGE_DIR)

    def test_build_fails(self) -> None:
        """A failed build prints ``error:`` and the reason on stderr, and exits 1."""

        def broken(*args: Any, **kwargs: Any) -> None:
            raise BuildError("fetching packages: E: Unable to locate package")

        self.patch(cli, "build_image", broken)
        self.assertEqual(main(["build", "--image-dir", "/images"]), 1)
        self.assertEqual(self.err.getvalue(), "error: fetching packages: E: Unable to locate package\n")

    def test_bad_recipe(self) -> None:
        """A recipe that cannot be read exits 1 with its error."""

        def bad(*args: Any, **kwargs: Any) -> None:
            raise RecipeError("bad image name '../x'")

        self.patch(cli, "build_image", bad)
        self.assertEqual(main(["build", "--name", "../x"]), 1)
        self.assertIn("error: bad image name", self.err.getvalue())

    def test_no_command(self) -> None:
        """Without a command, usage goes to stderr and the exit status is 2 (argparse's)."""
        error = self.assertRaises(SystemExit, main, [])
        self.assertEqual(error.code, 2)
        self.assertIn("usage: python -m vmservice.images", self.err.getvalue())
        self.assertEqual(self.calls, [])

    def test_force_only_for_build(self) -> None:
        """``--force`` belongs to ``build``: ``show --force`` is a usage error."""
        error = self.assertRaises(SystemExit, main, ["show", "--force"])
        self.assertEqual(error.code, 2)

    def test_import_arguments(self) -> None:
        """``import --image-dir D --ref R --force NAME FILE`` imports FILE as NAME into D."""
        self.patch(cli, "import_image", self.record)
        self.assertEqual(main(["import", "--image-dir", "/images", "--ref", "1.0", "--force", "app", "/tmp/app.tar"]), 0)
        [(args, kwargs)] = self.calls
        self.assertEqual(args, ("/images", "app", "/tmp/app.tar"))
        self.assertEqual((kwargs["ref"], kwargs["force"]), ("1.0", True))
        self.assertEqual(self.out.getvalue(), "image: recorded\n")

    def test_import_fails(self) -> None:
        """A failed import prints ``error:`` and the reason on stderr, and exits 1."""

        def broken(*args: Any, **kwargs: Any) -> None:
            raise ImportFailed("/tmp/app.tar: no linux/amd64 image (platforms found: linux/arm64)")

        self.patch(cli, "import_image", broken)
        self.assertEqual(main(["import", "app", "/tmp/app.tar"]), 1)
        self.assertEqual(self.err.getvalue(), "error: /tmp/app.tar: no linux/amd64 image (platforms found: linux/arm64)\n")
