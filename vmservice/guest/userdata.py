# -*- test-case-name: tests.guest.test_userdata -*-
"""
The node's userdata: a shell script run once, as root, with bash, at the first
boot of the node.

``{"op": "userdata", "size": N}`` with the script as the body (empty when the
node has none).  The answer, once userdata is over, is
``{"state": "finished"|"interrupted", "exit_code": N|null, "ran_script": bool}``.

The marker (:data:`~vmservice.guest.userdata_marker.USERDATA_MARKER`, on the node's
disk) makes it run once: written ``running`` (with the boot's id) before the
script starts and ``finished`` with the exit code after it ended, so a reboot,
relaunch or restore never runs it again.  A marker still ``running`` from an
earlier boot means the VM went down mid-way: it becomes ``interrupted`` (no
exit code) and the script is not run again.  A node without userdata gets a
``finished`` marker without exit code, so ``userdata_ran`` is true for it too.

The script runs in a process of its own session (:func:`run`), not a child
the agent waits for: an agent that restarts meanwhile finds the marker
``running`` and waits for it like the first one.  Its output goes to
:data:`USERDATA_LOG` and, line by line with a ``userdata:`` prefix, to the
console (the node's console log on the host).  The script itself is kept in
``/run`` (a tmpfs): it may hold credentials, and it is not needed once run.

Standard library only: it runs inside the guest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Mapping, Optional

from vmservice.guest.loop import Timer
from vmservice.guest.streams import GuestStream
from vmservice.guest.userdata_marker import USERDATA_MARKER, USERDATA_OVER, read_userdata_marker
from vmservice.guest.bodies import RecordBodyHandler
from vmservice.wire.openheaders.provisioning import MAX_USERDATA, UserdataHeader

__all__ = ["USERDATA_LOG", "USERDATA_SCRIPT", "UserdataHandler", "Userdata", "run", "write_marker"]

#: Where the script's output is kept in the guest.
USERDATA_LOG = "/var/log/vmservice/userdata.log"
#: Where the script is kept while it runs (tmpfs).
USERDATA_SCRIPT = "/run/vmservice/userdata.sh"
#: Seconds between two looks at the marker while the script runs.
POLL_INTERVAL = 0.2
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id(path: str = _BOOT_ID) -> str:
    """This boot's id (a new one at every boot of the kernel)."""
    try:
        with open(path) as stream:
            return stream.read().strip()
    except OSError:
        return ""


def write_marker(path: str, marker: Mapping[str, Any]) -> None:
    """Replace the marker at ``path`` atomically and durably (it is on the node's disk)."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    temporary = f"{path}.new"
    with open(temporary, "w") as stream:
        json.dump(marker, stream)
        stream.flush()
        os.fsync(stream.fileno())
    os.rename(temporary, path)
    directory = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class Userdata:
    """
    The files of userdata; tests point them elsewhere.

    :ivar marker: the marker file.
    :ivar script: where the script is written before it runs.
    :ivar log: where its output goes.
    :ivar console: where its output is echoed (``/dev/console``), or None.
    :ivar boot: this boot's id.
    """

    def __init__(self, marker: str = USERDATA_MARKER, script: str = USERDATA_SCRIPT, log: str = USERDATA_LOG,
                 console: Optional[str] = "/dev/console", boot: Optional[str] = None) -> None:
        self.marker = marker
        self.script = script
        self.log = log
        self.console = console
        self.boot = boot_id() if boot is None else boot

    def state(self) -> Optional[dict[str, Any]]:
        """
        The marker, once an earlier boot's ``running`` became ``interrupted``;
        None when userdata has not begun.
        """
        marker = read_userdata_marker(self.marker)
        if marker is not None and marker.get("state") == "running" and marker.get("boot_id") != self.boot:
            marker = dict(marker, state="interrupted", exit_code=None, ended=time.time())
            write_marker(self.marker, marker)
        return marker

    def begin(self, script: bytes, spawn: Callable[[list[str]], None]) -> dict[str, Any]:
        """
        Start userdata (it has not begun): mark it ``running`` and hand the
        runner's command line to ``spawn``; with no script, mark it ``finished``.
        """
        now = time.time()
        if not script:
            marker = {"state": "finished", "exit_code": None, "ran_script": False, "started": now, "ended": now,
                      "boot_id": self.boot}
            write_marker(self.marker, marker)
            return marker
        os.makedirs(os.path.dirname(self.script), mode=0o700, exist_ok=True)
        fd = os.open(self.script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o700)
        with os.fdopen(fd, "wb") as stream:
            stream.write(script)
        marker = {"state": "running", "ran_script": True, "started": now, "boot_id": self.boot}
        write_marker(self.marker, marker)
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        spawn([sys.executable, "-I", "-S", "-c",
               f"import sys; sys.path.insert(0, {package!r}); from vmservice.guest.userdata import run; run()",
               self.marker, self.script, self.log, self.console or ""])
        return marker


def _spawn(argv: list[str]) -> None:  # pragma: no cover - forks; run by the integration tests
    """
    Start the runner detached (forked twice, in a session of its own): init
    adopts and reaps it, and the agent neither waits for it nor takes it down
    when it restarts.
    """
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execv(argv[0], argv)
        except BaseException:
            os._exit(127)
        os._exit(0)
    os.waitpid(pid, 0)


def _answer(marker: Mapping[str, Any]) -> dict[str, Any]:
    exit_code = marker.get("exit_code")
    return {"state": marker.get("state"), "exit_code": exit_code if type(exit_code) is int else None,
            "ran_script": bool(marker.get("ran_script", True))}


class UserdataHandler(RecordBodyHandler[UserdataHeader]):
    """Runs the node's userdata once and answers when it is over (see the module's description)."""

    limit = MAX_USERDATA
    #: The files; tests replace them.
    files: Optional[Userdata] = None
    #: How the runner is started; tests replace it.
    spawn: Callable[[list[str]], None] = staticmethod(_spawn)

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._timer: Optional[Timer] = None
        self._files = self.files if self.files is not None else Userdata(
            marker=stream.context.userdata_marker)

    def read(self, header: Mapping[str, Any]) -> UserdataHeader:
        return UserdataHeader.from_json(header)

    def complete(self, body: bytes) -> None:
        if len(body) != self.request.size:
            self.refuse("the body is not 'size' bytes long")
            return
        marker = self._files.state()
        if marker is None:
            marker = self._files.begin(body, type(self).spawn)
        self._answer_when_over(marker)

    def _answer_when_over(self, marker: Optional[Mapping[str, Any]]) -> None:
        if marker is not None and marker.get("state") in USERDATA_OVER:
            self.reply(_answer(marker))
            return
        self._timer = self.stream.loop.call_later(POLL_INTERVAL, self._look)

    def _look(self) -> None:
        self._timer = None
        self._answer_when_over(self._files.state())

    def reset(self, code: int, reason: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _shell() -> list[str]:
    for candidate in ("/bin/bash", "/usr/bin/bash", "/bin/sh", "/opt/vmservice/bin/sh", "/opt/vmservice/runtime/bin/sh"):
        if os.access(candidate, os.X_OK):
            return [candidate]
    return ["/bin/sh"]


def run(argv: Optional[list[str]] = None) -> None:
    """
    The runner (its own process): run the script, copy its output to the log and
    the console, flush every file system to its disk, then mark userdata
    ``finished`` with the exit code (128 + the
    signal's number when a signal ended it, as shells report it).

    ``argv``: marker, script, log, console (empty for none); ``sys.argv[1:]`` by default.
    """
    marker_path, script, log_path, console_path = (sys.argv[1:] if argv is None else argv)[:4]
    marker = read_userdata_marker(marker_path) or {}
    os.makedirs(os.path.dirname(log_path), mode=0o755, exist_ok=True)
    environment = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
                   "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash", "LANG": "C.UTF-8"}
    with open(log_path, "ab", buffering=0) as log:
        console = None
        if console_path:
            try:
                console = open(console_path, "wb", buffering=0)
            except OSError:
                console = None
        try:
            cwd = "/root" if os.path.isdir("/root") else "/"
            process = subprocess.Popen(_shell() + [script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, env=environment, cwd=cwd, close_fds=True)
            assert process.stdout is not None
            partial = b""
            while True:
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                log.write(chunk)
                if console is not None:
                    lines = (partial + chunk).split(b"\n")
                    partial = lines.pop()
                    if lines:
                        console.write(b"".join(b"userdata: " + line + b"\n" for line in lines))
            if console is not None and partial:
                console.write(b"userdata: " + partial + b"\n")
            status = process.wait()
            exit_code = status if status >= 0 else 128 - status
        except OSError as error:
            log.write(f"userdata: cannot run: {error}\n".encode())
            exit_code = 127
        finally:
            if console is not None:
                console.close()
    # What the script wrote reaches the disk before it counts as done: a reset right after
    # (a reboot that is a reset) must not find the marker without the script's work.
    os.sync()
    write_marker(marker_path, dict(marker, state="finished", exit_code=exit_code, ended=time.time()))
    try:
        os.unlink(script)
    except OSError:
        pass


if __name__ == "__main__":  # pragma: no cover
    run()
