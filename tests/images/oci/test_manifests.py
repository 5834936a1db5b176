# -*- test-case-name: tests.images.oci.test_manifests -*-
"""
Tests for :mod:`vmservice.images.oci.manifests` (and the sources it reads, :mod:`vmservice.images.oci.source`):
images picked from OCI layouts and ``docker save`` tar files that the tests write (:mod:`tests.images.containers`).
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile

from twisted.trial.unittest import SynchronousTestCase

from tests.images.containers import Entry, docker_save, layer, oci_layout
from vmservice.images.oci import OciError, apply_layer, open_source


def read(path: str) -> bytes:
    """The content of the file ``path``."""
    with open(path, "rb") as stream:
        return stream.read()


class OpenSourceTests(SynchronousTestCase):
    """
    :func:`open_source` picks the ``linux/amd64`` image of OCI layouts and ``docker save`` tar files.
    """

    def setUp(self) -> None:
        self.base = os.path.abspath(self.mktemp())
        os.makedirs(self.base)
        self.layers = [layer([Entry("one", data=b"1")], compress=True), layer([Entry("two", data=b"2")])]

    def layer_contents(self, path: str, ref: str = "") -> tuple[str, list[str], str]:
        source, image = open_source(path, ref)
        try:
            root = os.path.join(self.base, "root")
            shutil.rmtree(root, ignore_errors=True)
            os.makedirs(root)
            for name in image.layers:
                with source.open(name) as stream:
                    apply_layer(stream, root)
            return image.digest, sorted(os.listdir(root)), image.ref
        finally:
            source.close()

    def test_layout_directory(self) -> None:
        """
        An OCI layout directory gives its manifest's digest and layers, lowest first, and its ref name.
        """
        digest = oci_layout(os.path.join(self.base, "layout"), self.layers, ref="1.0")
        self.assertEqual(self.layer_contents(os.path.join(self.base, "layout")), (digest, ["one", "two"], "1.0"))

    def test_multi_platform(self) -> None:
        """
        Of a multi-platform image (a nested index, as in a pulled image), the ``linux/amd64`` manifest is
        taken.
        """
        digest = oci_layout(os.path.join(self.base, "layout"), self.layers, nested=True,
                            others=[("linux", "arm64"), ("windows", "amd64")])
        self.assertEqual(self.layer_contents(os.path.join(self.base, "layout"))[0], digest)

    def test_flat_multi_platform(self) -> None:
        """
        Several platforms listed in ``index.json`` itself: the ``linux/amd64`` one is taken.
        """
        digest = oci_layout(os.path.join(self.base, "layout"), self.layers, others=[("linux", "arm64")])
        self.assertEqual(self.layer_contents(os.path.join(self.base, "layout"))[0], digest)

    def test_platform_from_config(self) -> None:
        """
        An index entry without a platform is judged by the image's config.
        """
        layout = os.path.join(self.base, "layout")
        digest = oci_layout(layout, self.layers)
        with open(os.path.join(layout, "index.json")) as stream:
            index = json.load(stream)
        del index["manifests"][0]["platform"]
        with open(os.path.join(layout, "index.json"), "w") as stream:
            json.dump(index, stream)
        self.assertEqual(self.layer_contents(layout)[0], digest)

    def test_no_amd64(self) -> None:
        """
        An image for another platform only is refused, naming the platforms found.
        """
        layout = os.path.join(self.base, "layout")
        oci_layout(layout, self.layers, others=[("linux", "arm64")])
        with open(os.path.join(layout, "index.json")) as stream:
            index = json.load(stream)
        index["manifests"] = [entry for entry in index["manifests"] if entry["platform"]["architecture"] == "arm64"]
        for entry in index["manifests"]:
            del entry["platform"]
        with open(os.path.join(layout, "index.json"), "w") as stream:
            json.dump(index, stream)
        error = self.assertRaises(OciError, open_source, layout)
        self.assertIn("no linux/amd64 image (platforms found: linux/arm64)", str(error))

    def test_several_images(self) -> None:
        """
        A layout with two amd64 images needs a ref to pick one; a ref that names none is refused.
        """
        layout = os.path.join(self.base, "layout")
        first = oci_layout(layout, self.layers, ref="first")
        with open(os.path.join(layout, "index.json")) as stream:
            index = json.load(stream)
        second = oci_layout(os.path.join(self.base, "other"), self.layers[:1], ref="second")
        with open(os.path.join(self.base, "other", "index.json")) as stream:
            index["manifests"] += json.load(stream)["manifests"]
        shutil.copytree(os.path.join(self.base, "other", "blobs"), os.path.join(layout, "blobs"), dirs_exist_ok=True)
        with open(os.path.join(layout, "index.json"), "w") as stream:
            json.dump(index, stream)
        error = self.assertRaises(OciError, open_source, layout)
        self.assertIn("several", str(error))
        self.assertEqual(self.layer_contents(layout, "first")[:2], (first, ["one", "two"]))
        self.assertEqual(self.layer_contents(layout, "second")[:2], (second, ["one"]))
        self.assertRaises(OciError, open_source, layout, "third")

    def test_damaged_blob(self) -> None:
        """
        A layer that does not match its digest is refused.
        """
        layout = os.path.join(self.base, "layout")
        oci_layout(layout, self.layers)
        blobs = os.path.join(layout, "blobs", "sha256")
        for name in os.listdir(blobs):
            if read(os.path.join(blobs, name))[:2] == b"\x1f\x8b":
                with open(os.path.join(blobs, name), "ab") as stream:
                    stream.write(b"tampered")
        error = self.assertRaises(OciError, open_source, layout)
        self.assertIn("digest", str(error))

    def test_layout_tar(self) -> None:
        """
        An OCI layout packed in a tar file (also what Docker 25 and later save) is read from the tar file.
        """
        layout = os.path.join(self.base, "layout")
        digest = oci_layout(layout, self.layers)
        packed = os.path.join(self.base, "layout.tar")
        with tarfile.open(packed, "w") as tar:
            for name in sorted(os.listdir(layout)):
                tar.add(os.path.join(layout, name), arcname=name)
        self.assertEqual(self.layer_contents(packed)[:2], (digest, ["one", "two"]))

    def test_docker_save(self) -> None:
        """
        A classic ``docker save`` tar file: its image and layers from ``manifest.json``, its tag as ref.
        """
        path = os.path.join(self.base, "saved.tar")
        docker_save(path, self.layers, tag="example/app:1")
        digest, names, ref = self.layer_contents(path)
        self.assertTrue(digest.startswith("sha256:"))
        self.assertEqual((names, ref), (["one", "two"], "example/app:1"))
        self.assertEqual(self.layer_contents(path, "example/app")[1], ["one", "two"])
        self.assertRaises(OciError, open_source, path, "other/app")

    def test_docker_save_other_platform(self) -> None:
        """
        A ``docker save`` of an arm64 image is refused.
        """
        path = os.path.join(self.base, "saved.tar")
        docker_save(path, self.layers, platform=("linux", "arm64"))
        error = self.assertRaises(OciError, open_source, path)
        self.assertIn("linux/arm64", str(error))

    def test_not_an_image(self) -> None:
        """
        A directory or file that is no image is refused with a message saying so.
        """
        self.assertIn("neither", str(self.assertRaises(OciError, open_source, self.base)))
        path = os.path.join(self.base, "plain")
        with open(path, "wb") as stream:
            stream.write(b"plain text")
        self.assertIn("neither", str(self.assertRaises(OciError, open_source, path)))
