# -*- test-case-name: tests.images.test_store -*-
"""
Tests for :mod:`vmservice.images.store`: finding images through their symbolic link.
"""

from __future__ import annotations

import datetime
import os

from twisted.python.filepath import FilePath
from twisted.trial.unittest import SynchronousTestCase

from tests.images.fakes import fake_image
from vmservice.images.store import ImageNotFound, default_image_dir, list_images, resolve_image


class ResolveTests(SynchronousTestCase):
    """
    :func:`resolve_image`.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        os.makedirs(self.base)

    def test_follows_link(self) -> None:
        """
        The image is found through its link and reported at its real directory, with every file and the
        parsed manifest; a FilePath works as well as a string.
        """
        real = os.path.join(self.base, "default-0123456789abcdef")
        fake_image(real)
        os.symlink("default-0123456789abcdef", os.path.join(self.base, "default"))
        for where in (self.base, FilePath(self.base)):
            image = resolve_image(where, "default")
            self.assertEqual(image.name, "default")
            self.assertEqual(image.path, FilePath(real))
            self.assertEqual(image.kernel, FilePath(real).child("vmlinux"))
            self.assertEqual(image.initrd, FilePath(real).child("initrd.img"))
            self.assertEqual(image.rootfs, FilePath(real).child("rootfs.ext4"))
            self.assertEqual(image.manifest["recipe_hash"], "0123456789abcdef")

    def test_missing(self) -> None:
        """
        A name never built raises ImageNotFound, whose message names the image, the directory and how to
        build it.
        """
        error = self.assertRaises(ImageNotFound, resolve_image, self.base, "default")
        self.assertEqual((error.name, error.image_dir), ("default", self.base))
        self.assertIn("'default'", str(error))
        self.assertIn(self.base, str(error))
        self.assertIn(f"vmctl image build default --image-dir {self.base}", str(error))

    def test_dangling_link(self) -> None:
        """
        A link to a directory that is gone is ImageNotFound.
        """
        os.symlink("default-gone", os.path.join(self.base, "default"))
        self.assertRaises(ImageNotFound, resolve_image, self.base, "default")

    def test_incomplete(self) -> None:
        """
        An image directory missing a file, or with a manifest that is not a JSON object, is ImageNotFound
        naming the file.
        """
        real = os.path.join(self.base, "default-1")
        fake_image(real)
        os.symlink("default-1", os.path.join(self.base, "default"))
        os.unlink(os.path.join(real, "initrd.img"))
        error = self.assertRaises(ImageNotFound, resolve_image, self.base, "default")
        self.assertIn("initrd.img", str(error))
        fake_image(os.path.join(self.base, "other-1"), manifest=[1, 2])
        os.symlink("other-1", os.path.join(self.base, "other"))
        self.assertRaises(ImageNotFound, resolve_image, self.base, "other")

    def test_bad_name(self) -> None:
        """
        A name with a slash cannot escape the image directory.
        """
        self.assertRaises(ImageNotFound, resolve_image, self.base, "../etc")


class DefaultDirTests(SynchronousTestCase):
    """
    :func:`default_image_dir`.
    """

    def test_environment(self) -> None:
        """
        $VMSERVICE_IMAGE_DIR wins; without it the cache directory is used.
        """
        self.patch(os, "environ", {"VMSERVICE_IMAGE_DIR": "/somewhere"})
        self.assertEqual(default_image_dir(), "/somewhere")
        self.patch(os, "environ", {})
        self.assertEqual(default_image_dir(), "/var/cache/vmservice/images")


class ListTests(SynchronousTestCase):
    """
    :func:`list_images`.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        os.makedirs(self.base)

    def add(self, name: str, digest: str, manifest: object) -> None:
        fake_image(os.path.join(self.base, f"{name}-{digest}"), manifest)
        os.symlink(f"{name}-{digest}", os.path.join(self.base, name))

    def test_listing(self) -> None:
        """
        Each linked, complete image is listed by name with the size of its three files, its build time,
        source, recipe hash and SSH server; an older manifest without source is a recipe build, one
        without built_at shows the directory's time. Build directories, broken links, the download cache
        and lock files are not images.
        """
        self.add("dev", "1111111111111111", {"name": "dev", "recipe_hash": "1111111111111111", "source": "recipe:dev",
                                             "ssh_server": True, "built_at": "2026-11-25T20:00:00+00:00"})
        self.add("default", "2222222222222222", {"name": "default", "recipe_hash": "2222222222222222"})
        self.add("mine", "3333333333333333", {"name": "mine", "source": "oci:example/app:1",
                                              "built_at": "2026-11-24T10:00:00"})
        os.utime(os.path.join(self.base, "default-2222222222222222"), (1700000000, 1700000000))
        fake_image(os.path.join(self.base, "old-4444444444444444"))
        os.symlink("nowhere", os.path.join(self.base, "broken"))
        os.makedirs(os.path.join(self.base, ".debs"))
        open(os.path.join(self.base, ".dev.lock"), "w").close()
        images = {info.name: info for info in list_images(self.base)}
        self.assertEqual(sorted(images), ["default", "dev", "mine"])
        dev = images["dev"]
        self.assertEqual((dev.source, dev.recipe_hash, dev.ssh_server, dev.created),
                         ("recipe:dev", "1111111111111111", True,
                          datetime.datetime(2026, 11, 25, 20, 0, tzinfo=datetime.timezone.utc)))
        self.assertEqual(dev.size, len("vmlinux") + len("initrd.img") + len("rootfs.ext4"))
        self.assertEqual(dev.path, os.path.join(self.base, "dev-1111111111111111"))
        default = images["default"]
        self.assertEqual((default.source, default.ssh_server, default.created),
                         ("recipe:default", None, datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc)))
        mine = images["mine"]
        self.assertEqual((mine.source, mine.recipe_hash, mine.created.tzinfo), ("oci:example/app:1", None,
                                                                                datetime.timezone.utc))

    def test_no_directory(self) -> None:
        """A directory that does not exist holds no images."""
        self.assertEqual(list_images(os.path.join(self.base, "missing")), [])
