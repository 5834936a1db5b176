# -*- test-case-name: tests.integration.images.test_oci -*-
"""
Integration tests of importing a container image (:mod:`vmservice.images.imported`): an OCI image layout
made by the test (two layers: files, a whiteout and an opaque directory; no shell, no Python, no C
library) is imported with ``python -m vmservice.images import``, a daemon whose host group uses it creates
a node with ``wait=agent``, and ``exec`` runs in it, on the runtime the import brought. A ``docker save``
tar file of an image with busybox as its own shell is imported with ``vmctl image import`` and runs
``exec`` with that shell.

The imported image is removed from the image directory afterwards; QEMU and the daemon are stopped by
:class:`tests.integration.daemon.Daemon`.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.images.containers import Entry, docker_save, layer, oci_layout
from vmservice.images.oci import apply_layer
from tests.integration.daemon import IMAGE_DIR, Daemon, SharedDaemonTestCase, ensure_image

#: Under this name the test's image is imported (and removed afterwards).
IMAGE_NAME = "oci-integration-test"
DOCKER_IMAGE_NAME = "docker-save-integration-test"
CRAFTED_IMAGE_NAME = "crafted-integration-test"


def _remove_image(name: str) -> None:
    link = os.path.join(IMAGE_DIR, name)
    if os.path.islink(link):
        target = os.path.realpath(link)
        os.unlink(link)
        shutil.rmtree(target, ignore_errors=True)


def _layers() -> list[bytes]:
    first = layer([
        Entry("etc", "dir", mode=0o755),
        Entry("etc/greeting", data=b"hello from layer 1\n"),
        Entry("data", "dir", mode=0o755),
        Entry("data/keep", data=b"kept\n"),
        Entry("data/gone", data=b"whited out\n"),
        Entry("data/linked", "hardlink", target="data/keep"),
        Entry("data/pointer", "symlink", target="/etc/greeting"),
        Entry("opaque", "dir", mode=0o755),
        Entry("opaque/old", data=b"lower\n"),
        Entry("opaque/sub", "dir", mode=0o755),
        Entry("opaque/sub/deep", data=b"lower\n"),
    ], compress=True)
    second = layer([
        Entry("data/.wh.gone"),
        Entry("opaque", "dir", mode=0o750),
        Entry("opaque/.wh..wh..opq"),
        Entry("opaque/new", data=b"upper\n", mode=0o600, uid=1000, gid=1000),
    ])
    return [first, second]


class ImportedImageTests(SharedDaemonTestCase):
    """
    A node of an imported image without shell or Python boots and runs ``exec``.
    """

    layout: str
    imported: dict[str, Any]
    created: dict[str, Any]

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.layout = tempfile.mkdtemp(prefix="vms-oci-", dir="/tmp")
        oci_layout(os.path.join(cls.layout, "image"), _layers(), ref="1.0")
        result = subprocess.run(
            [sys.executable, "-m", "vmservice.images", "import", "--image-dir", IMAGE_DIR, "--force", IMAGE_NAME,
             os.path.join(cls.layout, "image")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if result.returncode != 0:
            raise AssertionError(f"import failed ({result.returncode}):\n{result.stdout}")
        shown = subprocess.run(
            [sys.executable, "-m", "vmservice.images", "show", "--image-dir", IMAGE_DIR, "--name", IMAGE_NAME],
            stdout=subprocess.PIPE, text=True, check=True)
        cls.imported = json.loads(shown.stdout)
        cls.daemon = Daemon(groups=[{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
                                     "image": IMAGE_NAME}])
        cls.daemon.start()
        cls.created = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)

    @classmethod
    def _stop_shared(cls) -> None:
        super()._stop_shared()
        _remove_image(IMAGE_NAME)
        layout = getattr(cls, "layout", None)
        if layout:
            shutil.rmtree(layout, ignore_errors=True)

    def hostname(self) -> str:
        return str(self.created["hostname"])

    def test_manifest(self) -> None:
        """
        The import wrote a manifest like a recipe build's: its source, sums of the three artefacts, the
        default build it is based on, and no SSH server (the image has no sshd).
        """
        self.assertEqual(self.imported["name"], IMAGE_NAME)
        self.assertTrue(str(self.imported["source"]).startswith(f"oci:{self.layout}/image"), self.imported["source"])
        self.assertEqual(sorted(self.imported["artefacts"]), ["initrd.img", "rootfs.ext4", "vmlinux"])
        for record in self.imported["artefacts"].values():
            self.assertEqual(len(record["sha256"]), 64)
        self.assertIs(self.imported["ssh_server"], False)
        self.assertTrue(str(self.imported["base_image"]).startswith("default-"))
        self.assertEqual(self.imported["oci_config"]["Cmd"], ["/bin/sh"])

    def test_layer_files(self) -> None:
        """
        A file of the first layer is there, with its hard link and absolute symbolic link resolving in the
        guest.
        """
        daemon = self.daemon
        self.assertEqual(daemon.run(self.hostname(), "cat /etc/greeting"), (0, "hello from layer 1\n"))
        self.assertEqual(daemon.run(self.hostname(), "cat /data/pointer /data/linked"),
                         (0, "hello from layer 1\nkept\n"))
        self.assertEqual(daemon.run(self.hostname(), "stat -c %h /data/keep"), (0, "2\n"))

    def test_whiteout(self) -> None:
        """
        The file the second layer whited out is absent; its neighbour stays.
        """
        self.assertEqual(self.daemon.run(self.hostname(), "ls /data"), (0, "keep\nlinked\npointer\n"))
        code, _ = self.daemon.run(self.hostname(), "test -e /data/gone")
        self.assertEqual(code, 1)

    def test_opaque_directory(self) -> None:
        """
        The opaque directory holds only the second layer's file, with that layer's mode and owner.
        """
        self.assertEqual(self.daemon.run(self.hostname(), "ls -A /opaque"), (0, "new\n"))
        self.assertEqual(self.daemon.run(self.hostname(), "stat -c '%a %u:%g' /opaque /opaque/new"),
                         (0, "750 0:0\n600 1000:1000\n"))

    def test_runtime_shell(self) -> None:
        """
        Without a shell in the image, the command runs with the runtime's busybox ``sh``, and the image's
        ``/bin`` is empty of our tools.
        """
        self.assertEqual(self.daemon.run(self.hostname(), 'echo "$0"'), (0, "/opt/vmservice/runtime/bin/sh\n"))
        code, _ = self.daemon.run(self.hostname(), "test -e /bin/sh")
        self.assertEqual(code, 1)

    def test_health(self) -> None:
        """
        The agent answers health with the node's hostname, as in the default image.
        """
        health = self.daemon.json("GET", f"/vm/{self.hostname()}/health")
        self.assertEqual(health.get("hostname", self.hostname()), self.hostname())
        self.assertEqual(self.daemon.run(self.hostname(), "hostname"), (0, f"{self.hostname()}\n"))

    def test_stats(self) -> None:
        """
        The metrics agent runs on the runtime's Python: the node's statistics come, as in the default image.
        """
        hostname = self.hostname()
        stat = self.daemon.wait_for("a snapshot", lambda: self.daemon.json("GET", f"/node/{hostname}/stats")
                                    .get("snapshot"), timeout=60)
        self.assertEqual(stat["hostname"], hostname)
        self.assertGreater(stat["totalMemory"], 0)

    def test_ssh_keys_refused(self) -> None:
        """
        The image has no SSH server (``ssh_server`` false in its manifest): a create with ``ssh_keys`` is
        400 ``no_ssh_server``.
        """
        blob = b"".join(len(part).to_bytes(4, "big") + part for part in (b"ssh-ed25519", bytes(range(32))))
        key = "ssh-ed25519 " + base64.b64encode(blob).decode() + " test"
        status, _, data = self.daemon.request("POST", "/hostgroup/demo/nodes", {"ssh_keys": [key]})
        self.assertEqual((status, json.loads(data).get("code")), (400, "no_ssh_server"), data)

    def test_root_grown(self) -> None:
        """
        The agent grew the root file system to the node's 1 GiB disk once it was up (an ioctl: the runtime
        brings no file system tools).
        """
        code, output = self.daemon.run(self.hostname(), "df -k / | tail -n 1")
        self.assertEqual(code, 0)
        self.assertGreater(int(output.split()[1]), 900 * 1024, output)
        self.assertEqual(self.daemon.run(self.hostname(), "ls /opt/vmservice/runtime"), (0, "bin\nlib\n"))

    def test_shutdown_and_relaunch(self) -> None:
        """
        A second, persistent node runs its userdata (with the runtime's shell: the image has none), shuts
        down cleanly (power button, busybox init, our shutdown script on the runtime) and boots again with
        its disk.
        """
        daemon = self.daemon
        body = {"persistent": True, "userdata": "echo ran > /root/userdata\n"}
        host = str(daemon.json("POST", "/hostgroup/demo/nodes?wait=userdata&timeout=3m", body,
                               expect=201)["hostname"])
        self.assertEqual(daemon.run(host, "cat /root/userdata"), (0, "ran\n"))
        self.assertEqual(daemon.json("GET", f"/vm/{host}/health")["userdata_exit_code"], 0)
        self.assertEqual(daemon.run(host, "echo kept > /root/file && sync"), (0, ""))
        self.assertEqual(daemon.request("POST", f"/vm/{host}/shutdown", {"action": "shutdown"})[0], 200)
        daemon.wait_status(host, "Stopped", 120)
        with open(os.path.join(daemon.state_dir, "nodes", host, "console.log"), errors="replace") as stream:
            console = stream.read()
        self.assertIn("vmservice-init: syncing disks", console)
        daemon.json("POST", f"/vm/{host}/relaunch?wait=agent&timeout=3m")
        self.assertEqual(daemon.run(host, "cat /root/file"), (0, "kept\n"))
        daemon.json("DELETE", f"/hostgroup/demo/nodes/{host}")


def _busybox() -> bytes:
    """The static busybox of the default image (read out of its root file system with debugfs)."""
    from vmservice.images.store import resolve_image

    with tempfile.TemporaryDirectory(prefix="vms-busybox-") as work:
        subprocess.run(["debugfs", "-R", f"dump /usr/bin/busybox {work}/busybox",
                        resolve_image(IMAGE_DIR, "default").rootfs.path],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        with open(os.path.join(work, "busybox"), "rb") as stream:
            return stream.read()


class DockerSaveImageTests(SharedDaemonTestCase):
    """
    A ``docker save`` tar file of an image with a shell of its own (busybox, as in small distributions),
    imported with ``vmctl image import``: ``exec`` runs with the image's ``/bin/sh``.
    """

    layout: str
    created: dict[str, Any]

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.layout = tempfile.mkdtemp(prefix="vms-oci-", dir="/tmp")
        base = layer([Entry("bin", "dir", mode=0o755), Entry("bin/busybox", data=_busybox(), mode=0o755),
                      Entry("bin/sh", "symlink", target="busybox"), Entry("bin/cat", "symlink", target="busybox"),
                      Entry("bin/readlink", "symlink", target="busybox"),
                      Entry("app", "dir", mode=0o755), Entry("app/version", data=b"1\n")], compress=True)
        update = layer([Entry("app/version", data=b"2\n")])
        tarball = os.path.join(cls.layout, "saved.tar")
        docker_save(tarball, [base, update], tag="example/app:2")
        vmctl = [sys.executable, "-m", "vmservice.cli.main", "image", "import", "--image-dir", IMAGE_DIR, "--force",
                 DOCKER_IMAGE_NAME, tarball]
        result = subprocess.run(vmctl, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if result.returncode != 0:
            raise AssertionError(f"vmctl image import failed ({result.returncode}):\n{result.stdout}")
        cls.daemon = Daemon(groups=[{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G",
                                     "image": DOCKER_IMAGE_NAME}])
        cls.daemon.start()
        cls.created = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m", {}, expect=201)

    @classmethod
    def _stop_shared(cls) -> None:
        super()._stop_shared()
        _remove_image(DOCKER_IMAGE_NAME)
        layout = getattr(cls, "layout", None)
        if layout:
            shutil.rmtree(layout, ignore_errors=True)

    def test_image_shell(self) -> None:
        """
        The image's ``/bin/sh`` runs the command (the image has no bash), and the upper layer's file won.
        """
        host = str(self.created["hostname"])
        self.assertEqual(self.daemon.run(host, 'echo "$0"; readlink /proc/$$/exe; cat /app/version'),
                         (0, "/bin/sh\n/bin/busybox\n2\n"))
        with open(os.path.join(IMAGE_DIR, DOCKER_IMAGE_NAME, "manifest.json")) as stream:
            manifest = json.load(stream)
        self.assertTrue(manifest["source"].endswith("saved.tar:example/app:2"), manifest["source"])


class ZstdLayerTests(SynchronousTestCase):
    """
    A zstd-compressed layer is read through the real ``zstd`` program.
    """

    def test_zstd(self) -> None:
        root = os.path.abspath(self.mktemp())
        os.makedirs(root)
        raw = layer([Entry("zstd/file", data=b"zstd content")])
        packed = subprocess.run(["zstd", "-q", "-c"], input=raw, stdout=subprocess.PIPE, check=True).stdout
        apply_layer(io.BytesIO(packed), root)
        with open(os.path.join(root, "zstd/file"), "rb") as stream:
            self.assertEqual(stream.read(), b"zstd content")


class CraftedImageTests(SynchronousTestCase):
    """
    Imports of crafted images with the real import: a whiteout of ``..`` is refused, and a library an
    image names in its ``/etc/ld.so.preload`` is not loaded into the import's own programs run in its
    tree (as root on the host), while the guest keeps the file.
    """

    def setUp(self) -> None:
        ensure_image()
        self.layout = tempfile.mkdtemp(prefix="vms-oci-", dir="/tmp")
        self.addCleanup(shutil.rmtree, self.layout, True)
        self.addCleanup(_remove_image, CRAFTED_IMAGE_NAME)

    def import_layers(self, layers: list[bytes]) -> subprocess.CompletedProcess[str]:
        oci_layout(os.path.join(self.layout, "image"), layers, ref="1.0")
        return subprocess.run(
            [sys.executable, "-m", "vmservice.images", "import", "--image-dir", IMAGE_DIR, "--force",
             CRAFTED_IMAGE_NAME, os.path.join(self.layout, "image")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=600)

    def test_whiteout_of_parent_refused(self) -> None:
        """
        ``.wh...`` fails the import with its reason; nothing of the image is left behind (its name's lock
        file aside, which every import keeps), and nothing beside it was removed. Other tests build and
        remove images in the same directory at the same time: only this image's entries are compared, and
        the default image, beside the import's directory, is still there.
        """
        result = self.import_layers([layer([Entry("etc/file", data=b"x\n"), Entry(".wh...")])])
        self.assertNotEqual(result.returncode, 0, result.stdout)
        self.assertIn("not one entry of its directory", result.stdout)
        self.assertEqual([name for name in os.listdir(IMAGE_DIR)
                          if CRAFTED_IMAGE_NAME in name and name != f".{CRAFTED_IMAGE_NAME}.lock"], [])
        self.assertTrue(os.path.isfile(os.path.join(IMAGE_DIR, "default", "manifest.json")))

    def test_preload_not_loaded_by_the_import(self) -> None:
        """
        An image whose ``/etc/ld.so.preload`` names its own library (one that ends any program it is loaded
        into with exit code 99) imports: the import's checks in the tree ran without it; the imported root
        file system still has the file.
        """
        compiler = shutil.which("cc") or shutil.which("gcc")
        self.assertIsNotNone(compiler, "no C compiler to build the image's library: make apt installs gcc")
        assert compiler is not None
        source = os.path.join(self.layout, "evil.c")
        with open(source, "w") as stream:
            stream.write("#include <unistd.h>\n__attribute__((constructor)) static void evil(void) { _exit(99); }\n")
        library = os.path.join(self.layout, "evil.so")
        subprocess.run([compiler, "-shared", "-fPIC", "-o", library, source], check=True)
        with open(library, "rb") as stream:
            code = stream.read()
        result = self.import_layers([layer([Entry("etc/ld.so.preload", data=b"/lib/evil.so\n"),
                                            Entry("lib/evil.so", data=code, mode=0o755)])])
        self.assertEqual(result.returncode, 0, result.stdout)
        rootfs = os.path.join(os.path.realpath(os.path.join(IMAGE_DIR, CRAFTED_IMAGE_NAME)), "rootfs.ext4")
        shown = subprocess.run(["debugfs", "-R", "cat /etc/ld.so.preload", rootfs], capture_output=True, text=True,
                               check=True)
        self.assertEqual(shown.stdout, "/lib/evil.so\n")
