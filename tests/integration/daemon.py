"""
Running the real daemon for integration tests: ``twistd -n vmservice`` as a
child process with a configuration of the test's own, a short state
directory, and blocking HTTP helpers to talk to it.

Everything a test starts is stopped and removed in its cleanup, and
:func:`processes_under` finds any QEMU still running for a state directory.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import yaml
from twisted.trial.unittest import SynchronousTestCase

#: Where the image lives (built by `make image`; the tests build it if missing).
IMAGE_DIR = os.environ.get("VMSERVICE_IMAGE_DIR", "/var/cache/vmservice/images")


#: Seconds a create may take: the first one of a key builds the template (a cold boot and a save).
CREATE_TIMEOUT = "4m"


def ensure_image(name: str = "default") -> None:
    """Build image ``name`` if it is missing (cached: fast when present)."""
    from vmservice.images.build import build_image

    build_image(IMAGE_DIR, name=name, force=False, out=lambda *a, **k: None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def processes_under(text: str) -> list[int]:
    """Pids of processes whose command line mentions ``text`` (e.g. a state directory)."""
    found = []
    needle = text.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read()
        except OSError:
            continue
        if needle in argv and b"qemu-system" in argv:
            found.append(int(entry))
    return found


def wait_until(what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.05,
               details: Callable[[], str] = str) -> Any:
    """Poll ``predicate()`` until it is true (its value returned); fail after ``timeout`` seconds (saying ``details()``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}{details()}")
        time.sleep(interval)


class Daemon:
    """
    One vmservice daemon run as a child process.

    :param groups: the ``host_groups`` list of the configuration.
    :param api: overrides for the ``api`` section.
    """

    def __init__(self, groups: list[dict[str, Any]] | None = None, api: dict[str, Any] | None = None, **extra: Any) -> None:
        self.root = tempfile.mkdtemp(prefix="vms-", dir="/tmp")
        self.state_dir = os.path.join(self.root, "s")
        self.port = free_port()
        self.api = {"bind_address": "127.0.0.1", "port": self.port, **(api or {})}
        self.config = {
            "config": {
                "api": self.api,
                "state_dir": self.state_dir,
                "image_dir": IMAGE_DIR,
                "host_groups": groups
                if groups is not None
                else [{"name": "demo", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G"}],
                **extra,
            }
        }
        self.config_path = os.path.join(self.root, "vmservice.yaml")
        self.log_path = os.path.join(self.root, "twistd.log")
        self.process: subprocess.Popen[bytes] | None = None
        self.token: str | None = None
        #: Variables the daemon's environment has besides this process's (e.g. ``PATH``).
        self.environment: dict[str, str] = {}

    def write_config(self) -> None:
        with open(self.config_path, "w") as f:
            yaml.safe_dump(self.config, f)

    def command(self) -> list[str]:
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        return [twistd, "-n", "--pidfile=", "--logfile", self.log_path, "vmservice", "--config", self.config_path]

    def start(self, timeout: float = 60.0) -> None:
        """Start the daemon and wait until ``/healthz`` answers."""
        self.write_config()
        self.process = subprocess.Popen(self.command(), cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        env={**os.environ, **self.environment})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.process.returncode}: {self.output()}")
            try:
                status, _, _ = self.request("GET", "/healthz", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"daemon did not answer in {timeout} s: {self.log()}")

    def refused_start(self) -> str:
        """
        Run twistd with this configuration, which must refuse it: exit 1 with
        one line on stderr, returned.
        """
        self.write_config()
        result = subprocess.run(self.command(), cwd=self.root, capture_output=True, timeout=60)
        lines = [line for line in result.stderr.decode(errors="replace").splitlines() if line.strip()]
        if result.returncode != 1 or len(lines) != 1:
            raise AssertionError(f"expected exit 1 with one line, got {result.returncode}: {result.stderr!r}")
        return lines[0]

    def output(self) -> str:
        if self.process is None or self.process.stdout is None:
            return ""
        return self.process.stdout.read().decode(errors="replace")

    def log(self) -> str:
        """
        The daemon's whole log, its rotated parts first (twistd rotates it at
        1 MB and keeps every part), so it only ever grows.
        """
        directory, name = os.path.split(self.log_path)
        rotated = sorted((int(entry.rsplit(".", 1)[1]), entry) for entry in os.listdir(directory)
                         if entry.startswith(name + ".") and entry.rsplit(".", 1)[1].isdigit())
        text = ""
        for _, entry in reversed(rotated):
            with open(os.path.join(directory, entry), errors="replace") as f:
                text += f.read()
        try:
            with open(self.log_path, errors="replace") as f:
                return text + f.read()
        except OSError:
            return text

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90.0) -> int | None:
        """Signal the daemon and wait for it to exit; kill it after ``timeout``."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def rss(self) -> int:
        """The daemon's resident memory in bytes."""
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def cleanup(self) -> None:
        """Stop the daemon, kill any QEMU it left (by pid), remove every file."""
        self.stop()
        for pid in processes_under(self.state_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.root, ignore_errors=True)
        # Its directories in the tmpfs (named after its state directory): a daemon killed or stopped
        # mid-way leaves them, which the daemon's own stop would have removed.
        from vmservice.nodes.warm.fork_memory import memory_directory
        from vmservice.nodes.warm.template_files import ram_directory

        tmpfs = self.config["config"].get("templates_tmpfs_dir", "/dev/shm")
        for directory in (ram_directory(self.state_dir, tmpfs), memory_directory(self.state_dir, tmpfs)):
            shutil.rmtree(directory, ignore_errors=True)

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 120.0
    ) -> tuple[int, dict[str, str], bytes]:
        """One blocking HTTP request; JSON-encodes ``body`` unless it is bytes."""
        connection = self._connection(timeout)
        try:
            payload = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            all_headers = dict(headers or {})
            if self.token and "Authorization" not in all_headers:
                all_headers["Authorization"] = f"Bearer {self.token}"
            connection.request(method, path, body=payload, headers=all_headers)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        """An HTTP connection to the daemon: TCP, or its UNIX socket when bind_address is a path."""
        address = str(self.api.get("bind_address", ""))
        if not address.startswith("/"):
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

        class UnixConnection(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.settimeout(timeout)
                self.sock.connect(address)

        return UnixConnection("localhost", timeout=timeout)

    def json(self, method: str, path: str, body: Any = None, expect: int = 200, **kw: Any) -> Any:
        status, _, data = self.request(method, path, body, **kw)
        if status != expect:
            raise AssertionError(f"{method} {path}: {status} {data!r} (expected {expect})")
        return json.loads(data) if data else None

    def post(self, path: str, body: Any = None, expect: int = 200) -> bytes:
        """POST ``path`` and return the raw body; fail unless the status is ``expect``."""
        status, _, data = self.request("POST", path, body)
        if status != expect:
            raise AssertionError(f"POST {path}: {status} {data!r} (expected {expect})")
        return data

    def run(self, hostname: str, cmd: str) -> tuple[int, str]:
        """Run a shell line in a node (buffered exec): its exit code and stdout."""
        from urllib.parse import urlencode

        result = self.json("POST", f"/vm/{hostname}/exec?{urlencode({'cmd': cmd, 'buffered': 'true'})}")
        return result["exit_code"], result["stdout"]

    def nodes(self) -> dict[str, dict[str, Any]]:
        """The listed nodes by hostname."""
        return {node["hostname"]: node for node in self.json("GET", "/nodes")}

    def wait_for(self, what: str, predicate: Any, timeout: float = 60.0) -> Any:
        """Poll ``predicate()`` until it returns something true; fail after ``timeout`` seconds, with the log's end."""
        return wait_until(what, predicate, timeout, 0.1, lambda: f"; daemon log:\n{self.log()[-3000:]}")

    def reboot(self, hostname: str, command: str | None = None, timeout: float = 240.0) -> None:
        """
        Reboot a node's guest (reset by the host; or ``command`` run in it) and
        wait until its agent answers from the new boot.
        """
        boot_id = self.run(hostname, "cat /proc/sys/kernel/random/boot_id")[1]
        if command is None:
            self.post(f"/vm/{hostname}/shutdown?action=reboot")
        else:
            code, _ = self.run(hostname, command)
            if code != 0:
                raise AssertionError(f"{command!r} in {hostname} exited {code}")

        def rebooted() -> bool:
            try:
                code, text = self.run(hostname, "cat /proc/sys/kernel/random/boot_id")
            except AssertionError:
                return False
            return code == 0 and text != boot_id

        self.wait_for(f"{hostname}'s reboot", rebooted, timeout)

    def wait_status(self, hostname: str, status: str | None, timeout: float = 60.0) -> None:
        """Wait until the node is listed with ``status`` (``None``: until it is not listed)."""
        def reached() -> bool:
            node = self.nodes().get(hostname)
            return node is None if status is None else node is not None and node["status"] == status

        self.wait_for(f"{hostname} to be {status or 'gone'}", reached, timeout)

    def vm_pids(self) -> list[int]:
        """Pids of QEMU processes of this daemon's state directory."""
        return processes_under(os.path.join(self.state_dir, "nodes", ""))


class SharedDaemonTestCase(SynchronousTestCase):
    """
    A test case whose tests share one daemon (and whatever
    :meth:`start_shared` makes with it), because booting guests is slow.

    Trial has no ``setUpClass``: the fixture is made by the first test that
    runs, removed after the last one of the class (counted, so any order
    works), and at exit as a fallback when only some tests were selected.
    """

    daemon: Daemon
    _state: dict[type, dict[str, Any]] = {}

    @classmethod
    def start_shared(cls) -> None:
        """Start ``cls.daemon`` (and anything else the tests read)."""
        raise NotImplementedError

    @classmethod
    def _stop_shared(cls) -> None:
        daemon = getattr(cls, "daemon", None)
        if daemon is not None:
            daemon.cleanup()

    def setUp(self) -> None:
        cls = type(self)
        state = self._state.get(cls)
        if state is None:
            remaining = len([name for name in dir(cls) if name.startswith("test_")])
            state = self._state[cls] = {"remaining": remaining, "error": None}
            atexit.register(cls._stop_shared)
            try:
                cls.start_shared()
            except BaseException as error:
                state["error"] = error
                cls._stop_shared()
        if state["error"] is not None:
            raise state["error"]
        self.addCleanup(self._release)

    def _release(self) -> None:
        state = self._state[type(self)]
        state["remaining"] -= 1
        if state["remaining"] == 0:
            type(self)._stop_shared()


class TemplatesDaemonTestCase(SharedDaemonTestCase):
    """
    Tests sharing one daemon whose templates' RAM files (and forks' state
    files) go to a tmpfs directory of the class's own, ``shm``.

    :cvar groups: the daemon's host groups.
    :cvar settings: further configuration.
    """

    groups: list[dict[str, Any]] = []
    settings: dict[str, Any] = {}
    shm: str
    #: A bridge the groups use (created by the daemon), deleted once the daemon has stopped.
    bridge: str | None = None

    @classmethod
    def start_shared(cls) -> None:
        for image in sorted({"default", *(group.get("image", "default") for group in cls.groups)}):
            ensure_image(image)
        cls.shm = tempfile.mkdtemp(prefix="vms-t-", dir="/dev/shm")
        cls.daemon = Daemon(groups=cls.groups, templates_tmpfs_dir=cls.shm, **cls.settings)
        try:
            cls.daemon.start()
            cls.started()
        except BaseException:
            cls.daemon.cleanup()
            shutil.rmtree(cls.shm, ignore_errors=True)
            raise

    @classmethod
    def started(cls) -> None:
        """Called once the daemon runs."""

    @classmethod
    def _stop_shared(cls) -> None:
        try:
            super()._stop_shared()
        finally:
            shutil.rmtree(cls.shm, ignore_errors=True)
            if cls.bridge:
                subprocess.run(["ip", "link", "delete", cls.bridge], capture_output=True)

    def create_node(self, group: str, body: dict[str, Any] | None = None, timeout: str = "4m") -> str:
        """Create a node of ``group`` with ``wait=agent``, deleted when the test ends; its hostname."""
        created = self.daemon.json("POST", f"/hostgroup/{group}/nodes?wait=agent&timeout={timeout}", body or {},
                                   expect=201)
        hostname: str = created["hostname"]
        self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/{group}/nodes/{hostname}")
        return hostname

    def fork_node(self, hostname: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Fork ``hostname`` (201 expected); the children, deleted when the test ends."""
        children: list[dict[str, Any]] = self.daemon.json("POST", f"/vm/{hostname}/fork", body, expect=201,
                                                          timeout=300)
        for child in children:
            self.addCleanup(self.daemon.request, "DELETE", f"/hostgroup/{child['hostgroup']}/nodes/{child['hostname']}")
        return children

    def qemu_argv(self, hostname: str) -> list[str]:
        """The command line of ``hostname``'s QEMU (its pid from its record)."""
        with open(os.path.join(self.daemon.state_dir, "nodes", hostname, "node.json")) as f:
            pid = int(json.load(f)["pid"])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode().split("\0")

    def assert_own_network(self, hostname: str, ip: str, prefix: int = 30) -> str:
        """
        ``hostname``'s guest has the MAC of its own QEMU command line, the
        address ``ip`` (``/prefix``: an isolated node's /30 by default) and a
        default route, and its gateway answers ARP for it at once; returns
        that MAC.
        """
        mac = " ".join(self.qemu_argv(hostname)).split("virtio-net-device,netdev=net0,mac=")[1].split()[0].lower()
        code, out = self.daemon.run(hostname, "cat /sys/class/net/eth0/address; ip -4 addr show eth0; ip route")
        self.assertEqual(code, 0)
        self.assertEqual(out.split("\n")[0], mac)
        self.assertIn(f"inet {ip}/{prefix}", out)
        gateway = out.split("default via ")[1].split()[0]
        probe = (f"python3 -c \"import socket; s=socket.socket(); s.settimeout(1); s.connect_ex(('{gateway}', 9))\"; "
                 f"ip neigh show {gateway}")
        code, out = self.daemon.run(hostname, probe)
        self.assertEqual(code, 0)
        self.assertIn("lladdr", out)
        return mac

    def backing_file(self, hostname: str) -> str:
        """The backing file of ``hostname``'s disk ('' when it has none)."""
        from vmservice.storage.overlay import disk_info

        info = disk_info(os.path.join(self.daemon.state_dir, "nodes", hostname, "disk.qcow2"))
        assert info is not None
        return info.backing_file or ""


class SharedGuestTestCase(SharedDaemonTestCase):
    """
    Tests sharing one daemon with one booted node, ``demo-1`` (its create
    answer in ``created``), created with ``create_body``.
    """

    created: dict[str, Any]
    create_body: dict[str, Any] = {}
    #: The daemon's host groups, one named ``demo`` among them (``None``: the daemon's default).
    groups: list[dict[str, Any]] | None = None

    @classmethod
    def start_shared(cls) -> None:
        ensure_image()
        cls.daemon = Daemon(groups=cls.groups)
        cls.daemon.start()
        cls.created = cls.daemon.json(
            "POST", "/hostgroup/demo/nodes?wait=agent&timeout=2m", cls.create_body, expect=201
        )
