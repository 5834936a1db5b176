# -*- test-case-name: tests.guest.test_login -*-
"""
The node's login user and SSH keys, and its SSH server.

``{"op": "login", "user": NAME}`` with the user's authorized keys as the body
(OpenSSH lines, possibly none):

- the user is created when missing (``/etc/passwd``, ``/etc/group``,
  ``/etc/shadow``; the first free id from 1000, a home directory
  ``/home/NAME``, bash as the shell when the image has it, no password);
- with keys, ``~/.ssh/authorized_keys`` is replaced by them (mode 0600, the
  directory 0700, both the user's), and the SSH server is started unless it
  runs: host keys made when missing (ed25519: quick even without hardware
  acceleration), ``/run/sshd``, the configuration
  :data:`SSHD_CONFIG` (keys only, no PAM, no passwords);
- without keys, no SSH server is started.

SSH host keys are each node's own.  No image holds any (a recipe build makes
none, an import removes the container image's), so a cold-booted node makes
its own when its SSH server first starts.  A clone or a fork's child starts
with a copy of its template's or parent's disk and memory, and so of their
keys and of a running SSH server (a fork's parent's): its adoption
(:mod:`vmservice.guest.identity`), right after the reseed of the kernel's
random generator and before its network is its own, stops that server
(:func:`stop_inherited_sshd`: ``SIGSTOP``, so it never runs again: it
accepts no connection and sends no key) and marks the keys inherited; a
server the agent did not start (an earlier agent process's, not logged in
since; one started by hand with the usual pid file) is stopped the same
way with the deferred work below.
After the adoption's answer, with the agent's other deferred start-up work,
:func:`renew_host_keys` deletes them (every ``/etc/ssh/ssh_host_*_key`` and
its ``.pub``) and, when a server was stopped, ends it (``SIGKILL``) and
starts one again, with a key made then.  A ``login`` that comes sooner does
both first itself.  The old keys are never served again; a copy of the
parent's memory (the old server's included) is the child's, which no new
key changes.

The answer is ``{"user", "uid", "home", "created": bool, "sshd": "started" |
"running" | "absent" | "off"}`` ("absent": the image has no SSH server).
Keys a user adds inside the guest belong in ``~/.ssh/authorized_keys2``,
which the daemon never touches.

Standard library only: it runs inside the guest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, Mapping, Optional

from vmservice.guest.bodies import RecordBodyHandler
from vmservice.wire.openheaders.provisioning import LoginHeader

__all__ = ["HOST_KEY", "INHERITED", "LoginHandler", "SSHD", "SSHD_CONFIG", "System", "ensure_user", "renew_host_keys",
           "sshd_config", "stop_inherited_sshd"]

SSHD = "/usr/sbin/sshd"
SSHD_CONFIG = "/etc/vmservice/sshd_config"
SSHD_PID = "/run/sshd.pid"
#: The host key of the SSH server the agent starts.
HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"
#: Where host keys are (of any type: an image's own server may have others).
HOST_KEY_DIR = "/etc/ssh"
#: Most bytes of authorized keys.
MAX_KEYS = 256 * 1024


def sshd_config(host_key: str) -> str:
    """The SSH server's configuration: public keys only, for any user that has them (root too)."""
    return "\n".join([
        "# Written by the vmservice agent: public-key logins only.",
        f"HostKey {host_key}",
        "UsePAM no",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "AuthorizedKeysFile .ssh/authorized_keys .ssh/authorized_keys2",
        "Subsystem sftp /usr/lib/openssh/sftp-server",
        f"PidFile {SSHD_PID}",
        "PrintMotd no",
        "",
    ])


class System:
    """
    The files and programs :class:`LoginHandler` works on; tests root them in a
    temporary directory and leave the SSH server alone.
    """

    def __init__(self, root: str = "/", sshd: str = SSHD) -> None:
        self.root = root
        self.sshd = sshd

    def path(self, absolute: str) -> str:
        """``absolute`` inside this system's root."""
        return os.path.join(self.root, absolute.lstrip("/"))

    def run(self, argv: list[str]) -> None:
        """Run a program to its end; OSError if it fails."""
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              close_fds=True)
        if done.returncode != 0:
            raise OSError(f"{argv[0]} failed ({done.returncode}): {done.stdout.decode(errors='replace')[:300]}")

    def sshd_pid(self) -> Optional[int]:
        """The process of the SSH server started earlier, if it still runs."""
        path = self.path(SSHD_PID)
        if not os.access(path, os.F_OK):
            # The usual case on a clone's path: no exception raised and caught (paths translated anew).
            return None
        try:
            with open(path) as stream:
                pid = int(stream.read().strip())
            with open(f"/proc/{pid}/comm") as stream:
                return pid if stream.read().strip() == "sshd" else None
        except (OSError, ValueError):
            return None

    def sshd_running(self) -> bool:
        """Whether the SSH server started earlier still runs."""
        return self.sshd_pid() is not None

    def signal(self, pid: int, number: int) -> None:
        """Send signal ``number`` to process ``pid``; nothing if it is gone."""
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            pass

    def wait_gone(self, pid: int, timeout: float = 5.0) -> None:
        """Wait (at most ``timeout`` seconds) until process ``pid`` has ended: its sockets are closed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as stream:
                    if stream.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                        return
            except OSError:
                return
            time.sleep(0.01)


def _replace(path: str, text: str, mode: int) -> None:
    temporary = f"{path}.vmservice-new"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "w") as stream:
        stream.write(text)
    os.chmod(temporary, mode)
    os.rename(temporary, path)


def _read(path: str) -> str:
    try:
        with open(path) as stream:
            return stream.read()
    except FileNotFoundError:
        return ""


def ensure_user(system: System, name: str) -> tuple[int, int, str, bool]:
    """
    ``(uid, gid, home, created)`` of user ``name``, created when missing.
    """
    passwd_path = system.path("/etc/passwd")
    passwd = _read(passwd_path)
    used = set()
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 7 and fields[2].isdigit() and fields[3].isdigit():
            if fields[0] == name:
                return int(fields[2]), int(fields[3]), fields[5], False
            used.add(int(fields[2]))
    group_path = system.path("/etc/group")
    group = _read(group_path)
    used_gids = {int(f[2]) for f in (line.split(":") for line in group.splitlines()) if len(f) >= 3 and f[2].isdigit()}
    uid = 1000
    while uid in used or uid in used_gids:
        uid += 1
    home = f"/home/{name}"
    shell = "/bin/bash" if os.path.exists(system.path("/bin/bash")) else "/bin/sh"
    if not any(line.split(":")[0] == name for line in group.splitlines()):
        _replace(group_path, group + ("" if not group or group.endswith("\n") else "\n") + f"{name}:x:{uid}:\n", 0o644)
    shadow_path = system.path("/etc/shadow")
    if os.path.exists(shadow_path):
        shadow = _read(shadow_path)
        _replace(shadow_path, shadow + ("" if not shadow or shadow.endswith("\n") else "\n") + f"{name}:*:19000:0:99999:7:::\n",
                 0o640)
    _replace(passwd_path, passwd + ("" if not passwd or passwd.endswith("\n") else "\n")
             + f"{name}:x:{uid}:{uid}::{home}:{shell}\n", 0o644)
    home_path = system.path(home)
    os.makedirs(home_path, mode=0o755, exist_ok=True)
    os.chown(home_path, uid, uid)
    return uid, uid, home, True


def install_keys(system: System, uid: int, gid: int, home: str, keys: str) -> None:
    """Replace the user's ``~/.ssh/authorized_keys`` with ``keys``."""
    directory = system.path(os.path.join(home, ".ssh"))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chown(directory, uid, gid)
    os.chmod(directory, 0o700)
    path = os.path.join(directory, "authorized_keys")
    _replace(path, keys, 0o600)
    os.chown(path, uid, gid)


class _Inherited:
    """
    What a clone's or fork child's adoption left for :func:`renew_host_keys`.

    :ivar keys: the host keys on the disk are the template's or the parent's.
    :ivar sshd: the process of the SSH server that ran (a copy of the parent's), stopped (``SIGSTOP``)
        by the adoption, to be ended and replaced by one with a new key; ``None``: none ran.
    """

    keys = False
    sshd: Optional[int] = None


#: The agent's one record of it (an adoption sets it; the deferred work and ``login`` clear it).
INHERITED = _Inherited()


class _Server:
    """
    :ivar seen: this agent started an SSH server, or found it running at a login (a fork's child's copy
        of its parent's agent says so too; a template's agent never did).
    """

    seen = False


#: What the agent knows of its SSH server.
SERVER = _Server()


def stop_inherited_sshd(system: System) -> None:
    """
    In an adoption: stop the SSH server copied from the parent (if the agent started one) and mark the
    host keys inherited (see the module's description).  No process started: it is on a clone's path,
    where it costs nothing (a template's agent never started a server: not even the pid file is looked
    at, whose system calls a clone would translate anew).  The server is stopped (``SIGSTOP``: it never
    runs again, so it accepts no connection and sends no key), not killed: its exit (the kernel tearing
    its memory down, translated anew under TCG) would take the guest's one vCPU before the answer.
    :func:`renew_host_keys` ends it after the answer.
    """
    INHERITED.keys = True
    if SERVER.seen:
        _stop_sshd(system)


def _stop_sshd(system: System) -> None:
    """Stop the SSH server of the pid file, if one runs, for :func:`_end_inherited_sshd`."""
    pid = system.sshd_pid()
    if pid is not None:
        system.signal(pid, signal.SIGSTOP)
        INHERITED.sshd = pid
        try:
            os.unlink(system.path(SSHD_PID))
        except FileNotFoundError:
            pass


def _end_inherited_sshd(system: System) -> Optional[int]:
    """End the SSH server the adoption stopped (if any), once it is gone (its port free): its pid."""
    pid, INHERITED.sshd = INHERITED.sshd, None
    if pid is not None:
        system.signal(pid, signal.SIGKILL)
        system.wait_gone(pid)
    return pid


def _delete_inherited_keys(system: System) -> list[str]:
    """Delete the inherited host keys, once: their names."""
    if not INHERITED.keys:
        return []
    INHERITED.keys = False
    directory = system.path(HOST_KEY_DIR)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    deleted = []
    for name in names:
        if name.startswith("ssh_host_") and (name.endswith("_key") or name.endswith("_key.pub")):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                continue
            deleted.append(name)
    return deleted


def renew_host_keys(system: System) -> str:
    """
    After a clone's or fork child's adoption (the agent's deferred work): delete the inherited host keys,
    and start the SSH server again (with a new key) if the adoption stopped one.  What it did, for the log
    (empty: nothing).
    """
    if INHERITED.sshd is None:
        # One the agent did not know of: started by an earlier agent process not asked to log in since,
        # or by hand with the usual pid file.
        _stop_sshd(system)
    deleted = _delete_inherited_keys(system)
    done = [f"deleted the inherited SSH host keys ({', '.join(deleted)})"] if deleted else []
    if _end_inherited_sshd(system) is not None:
        done.append(f"SSH server {start_sshd(system)} with a new host key")
    return "; ".join(done)


def start_sshd(system: System) -> str:
    """Start the SSH server unless it runs: ``started``, ``running`` or ``absent``."""
    # A login sooner than the adoption's deferred work must not start a server with the parent's keys
    # (nor try while the stopped one holds the port).
    _delete_inherited_keys(system)
    _end_inherited_sshd(system)
    if not os.access(system.path(system.sshd), os.X_OK):
        return "absent"
    if system.sshd_running():
        SERVER.seen = True
        return "running"
    host_key = HOST_KEY
    if not os.path.exists(system.path(host_key)):
        os.makedirs(system.path("/etc/ssh"), mode=0o755, exist_ok=True)
        system.run(["/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", system.path(host_key)])
    os.makedirs(system.path("/run/sshd"), mode=0o755, exist_ok=True)
    os.makedirs(os.path.dirname(system.path(SSHD_CONFIG)), mode=0o755, exist_ok=True)
    _replace(system.path(SSHD_CONFIG), sshd_config(host_key), 0o644)
    system.run([system.sshd, "-f", SSHD_CONFIG])
    SERVER.seen = True
    return "started"


class LoginHandler(RecordBodyHandler[LoginHeader]):
    """Makes the login user, installs its keys, starts the SSH server (see the module's description)."""

    limit = MAX_KEYS
    #: The system worked on; tests replace it.
    system: Optional[System] = None

    def read(self, header: Mapping[str, Any]) -> LoginHeader:
        return LoginHeader.from_json(header)

    def complete(self, body: bytes) -> None:
        system = self.system if self.system is not None else System()
        name = self.request.user
        keys = body.decode("utf-8")
        uid, gid, home, created = ensure_user(system, name)
        sshd = "off"
        if keys.strip():
            install_keys(system, uid, gid, home, keys)
            sshd = start_sshd(system)
        answer: dict[str, Any] = {"user": name, "uid": uid, "home": home, "created": created, "sshd": sshd}
        self.reply(answer)
