"""
A real development control plane for integration tests (``python -m vmservice.devcluster``), started
in a private temporary directory on free loopback ports, and blocking HTTP helpers to talk to it.

:class:`SharedControlPlaneTestCase` shares one control plane between the tests of a class, the way
:class:`tests.integration.daemon.SharedDaemonTestCase` shares a daemon, and stops it (``stop --purge``)
after the last test, or at exit, even when a test failed.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from typing import Any

from tests.integration.daemon import SharedDaemonTestCase

#: Seconds ``start`` may take: it builds the control plane first when the cache lacks it (minutes).
START_TIMEOUT = 1800


def devcluster(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m vmservice.devcluster ARGV`` (its output captured)."""
    return subprocess.run([sys.executable, "-m", "vmservice.devcluster", *argv], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


class ControlPlane:
    """
    One started control plane.

    :ivar top: the private temporary directory holding it.
    :ivar directory: its directory (``top/cp``).
    :ivar nodes: the node names it has identities for.
    """

    def __init__(self, nodes: tuple[str, ...] = ("vms-a", "vms-b")) -> None:
        self.top = tempfile.mkdtemp(prefix="vms-cp-")
        self.directory = os.path.join(self.top, "cp")
        self.nodes = nodes
        self.output = ""

    def start(self) -> None:
        """Start it; raise with its output if it fails."""
        result = devcluster("start", "--dir", self.directory, "--ports", "auto", "--nodes", ",".join(self.nodes),
                            timeout=START_TIMEOUT)
        self.output = result.stdout + result.stderr
        if result.returncode != 0:
            raise AssertionError(f"the control plane did not start ({result.returncode}):\n{self.output}")

    def state(self) -> dict[str, Any]:
        """Its ``state.json``."""
        with open(os.path.join(self.directory, "state.json"), encoding="utf-8") as f:
            state: dict[str, Any] = json.load(f)
        return state

    def stop(self) -> subprocess.CompletedProcess[str]:
        """``stop --purge``, then remove the temporary directory."""
        try:
            return devcluster("stop", "--dir", self.directory, "--purge")
        finally:
            shutil.rmtree(self.top, ignore_errors=True)

    def token(self, node: str) -> str:
        """Node ``node``'s token."""
        with open(os.path.join(self.directory, "nodes", f"{node}.token"), encoding="utf-8") as f:
            return f.read().strip()

    def kubectl(self, *argv: str, stdin: str | None = None) -> str:
        """The output of the control plane's ``kubectl ARGV...`` as its administrator; raise with its error."""
        kubectl = os.path.join(self.state()["bin_dir"], "kubectl")
        result = subprocess.run([kubectl, "--kubeconfig", os.path.join(self.directory, "admin.kubeconfig"), *argv],
                                capture_output=True, text=True, timeout=60, input=stdin)
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(argv)}: {result.stderr}")
        return result.stdout

    def request(self, method: str, path: str, token: str, body: object = None) -> tuple[int, dict[str, Any]]:
        """``(status, JSON answer)`` of a request to the API server with ``token``, trusting its CA."""
        context = ssl.create_default_context(cafile=os.path.join(self.directory, "ca.crt"))
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.state()["api_url"] + path, data=data, method=method,
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return response.status, json.loads(response.read(1 << 20) or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read(1 << 20) or b"{}")


class SharedControlPlaneTestCase(SharedDaemonTestCase):
    """Tests sharing one control plane, ``cls.plane`` (with identities for ``cls.nodes``)."""

    nodes: tuple[str, ...] = ("vms-a", "vms-b")
    plane: ControlPlane | None = None

    @classmethod
    def start_shared(cls) -> None:
        cls.plane = ControlPlane(cls.nodes)
        cls.plane.start()

    @classmethod
    def _stop_shared(cls) -> None:
        plane, cls.plane = cls.plane, None
        if plane is not None:
            plane.stop()
