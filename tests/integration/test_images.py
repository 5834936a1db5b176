# -*- test-case-name: tests.integration.test_images -*-
"""
Named images against a real daemon and guest: a node made from the ``dev`` image (``disk_image``) has
git, curl with the CA bundle, a working C compiler and the SSH server; ``GET /images`` lists what is
built; an image that is not built is a 400 naming those that are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from tests.integration.daemon import IMAGE_DIR, Daemon, SharedDaemonTestCase, ensure_image
from vmservice.images.store import resolve_image


class DevImageTests(SharedDaemonTestCase):
    created: dict[str, Any]

    key: str

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        ensure_image("dev")
        keys = tempfile.mkdtemp(prefix="vms-images-", dir="/tmp")
        try:
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", f"{keys}/id"],
                           check=True)
            with open(f"{keys}/id") as stream:
                cls.key = stream.read()
            with open(f"{keys}/id.pub") as stream:
                public = stream.read().strip()
        finally:
            shutil.rmtree(keys)
        cls.daemon = Daemon()
        cls.daemon.start()
        cls.created = cls.daemon.json("POST", "/hostgroup/demo/nodes?wait=agent&timeout=3m",
                                      {"disk_image": "dev", "ssh_keys": [public]}, expect=201)

    def run_ok(self, command: str) -> str:
        code, output = self.daemon.run(self.created["hostname"], command)
        self.assertEqual(code, 0, f"{command}: {output}")
        return output

    def test_tools(self) -> None:
        """
        git, curl and gcc answer; the CA bundle exists and holds certificates; cc compiles and links a
        program that runs; the SSH server and its privilege-separation user are there.
        """
        self.assertRegex(self.run_ok("git --version"), r"^git version 2\.")
        self.assertIn("gcc (Debian", self.run_ok("gcc --version"))
        self.assertRegex(self.run_ok("curl --version"), r"^curl \d")
        self.assertIn("/etc/ssl/certs/ca-certificates.crt", self.run_ok("ls /etc/ssl/certs/ca-certificates.crt"))
        self.assertGreater(int(self.run_ok("grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt")), 100)
        self.assertEqual(self.run_ok(
            "cd /tmp && printf '#include <stdio.h>\\nint main(void){puts(\"compiled\");return 0;}\\n' > c.c"
            " && cc -o c c.c && ./c && make --version | head -1"),
            "compiled\nGNU Make 4.3\n")
        self.assertEqual(self.run_ok("test -x /usr/sbin/sshd && id -un sshd"), "sshd\n")
        # OpenSSL's hash links are there, and Python's default context trusts the bundle's certificates.
        self.assertGreater(int(self.run_ok("ls /etc/ssl/certs | grep -c '[.]0$'")), 100)
        self.assertGreater(int(self.run_ok(
            "python3 -c 'import ssl; print(len(ssl.create_default_context().get_ca_certs()))'")), 100)

    def test_ssh_login(self) -> None:
        """
        With keys, the image's SSH server runs (it needs its privilege-separation user and /run/sshd) and
        takes a key login, here from the guest's own ssh client over loopback.
        """
        self.assertEqual(self.run_ok("pgrep -x sshd >/dev/null && echo running"), "running\n")
        self.run_ok(f"umask 077 && cat > /tmp/id <<'EOF'\n{self.key}EOF")
        self.assertEqual(self.run_ok(
            "ssh -i /tmp/id -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
            " -o LogLevel=ERROR root@127.0.0.1 'id -un; hostname'"),
            f"root\n{self.created['hostname']}\n")

    def test_describe_and_listing(self) -> None:
        """The node reports its own image; GET /images lists default and dev with their sources and hashes."""
        described = self.daemon.json("GET", f"/vm/{self.created['hostname']}")
        self.assertEqual(described["image"], "dev")
        self.assertIn("/dev-", described["disk"]["backing_file"])
        images = {image["name"]: image for image in self.daemon.json("GET", "/images")}
        self.assertLessEqual({"default", "dev"}, set(images))
        dev = images["dev"]
        manifest = resolve_image(IMAGE_DIR, "dev").manifest
        self.assertEqual((dev["source"], dev["recipe_hash"], dev["ssh_server"]),
                         ("recipe:dev", manifest["recipe_hash"], True))
        self.assertEqual(images["default"]["source"], "recipe:default")
        self.assertGreater(dev["size"], images["default"]["size"])
        self.assertEqual(dev["created"][:19], str(manifest["built_at"])[:19])

    def test_unknown_image(self) -> None:
        """An image that is not built is a 400 naming the built ones, and no node is made."""
        before = set(self.daemon.nodes())
        status, _, body = self.daemon.request("POST", "/hostgroup/demo/nodes", json.dumps({"disk_image": "nope"}).encode())
        error = json.loads(body)
        self.assertEqual((status, error["code"]), (400, "unknown_image"), body)
        self.assertIn("'nope'", error["error"])
        for name in ("default", "dev"):
            self.assertIn(name, error["error"])
        self.assertEqual(set(self.daemon.nodes()), before)

    def vmctl(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "vmservice.cli.main", *argv], capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL,
                              env={**os.environ, "VMSERVICE_IMAGE_DIR": IMAGE_DIR})

    def test_vmctl(self) -> None:
        """
        vmctl image list shows the images through the client (a table, or JSON); vmctl image build NAME
        finds the dev image up to date and says where it is.
        """
        url = f"http://127.0.0.1:{self.daemon.port}"
        table = self.vmctl("image", "list", "--url", url)
        self.assertEqual(table.returncode, 0, table.stderr)
        lines = table.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "SIZE", "CREATED", "SOURCE", "RECIPE", "HASH"])
        dev_hash = resolve_image(IMAGE_DIR, "dev").manifest["recipe_hash"]
        self.assertIn(["dev", "recipe:dev", dev_hash], [[line.split()[0], *line.split()[-2:]] for line in lines[1:]])
        listed = self.vmctl("image", "list", "--json", "--url", url)
        self.assertLessEqual({"default", "dev"}, {image["name"] for image in json.loads(listed.stdout)})
        built = self.vmctl("image", "build", "dev")
        self.assertEqual((built.returncode, built.stderr), (0, ""))
        self.assertIn(f"image dev: up to date ({IMAGE_DIR}/dev-{dev_hash})", built.stdout)
