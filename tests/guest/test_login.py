# -*- test-case-name: tests.guest.test_login -*-
"""
The guest's ``login`` operation (:class:`~vmservice.guest.login.LoginHandler`)
through a real session, on a system rooted in a temporary directory whose
programs are recorded instead of run.  The real SSH server runs in
``tests.integration.test_guest_setup``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import GuestSessionMixin
from vmservice.guest import login as login_module
from vmservice.guest.login import SSHD_CONFIG, LoginHandler, System, ensure_user, sshd_config
from vmservice.wire import ResetCode
from vmservice.wire.events import Data, HalfClose, Open, Reset

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBtvT6HR4TvFsTmVm7wBgXVf0M6RprIaaQJcYmcvtIvz alice@laptop"


class RecordingSystem(System):
    """Programs are recorded; the SSH server counts as running once started."""

    def __init__(self, root: str) -> None:
        super().__init__(root, sshd="/usr/sbin/sshd")
        self.ran: list[list[str]] = []
        self.started = False

    def run(self, argv: list[str]) -> None:
        self.ran.append(argv)
        if argv[0] == self.sshd:
            self.started = True

    def sshd_running(self) -> bool:
        return self.started


class LoginTests(GuestSessionMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.root = tempfile.mkdtemp(dir="/tmp")
        self.addCleanup(shutil.rmtree, self.root)
        os.makedirs(os.path.join(self.root, "etc"))
        os.makedirs(os.path.join(self.root, "bin"))
        os.makedirs(os.path.join(self.root, "root"))
        self.write("etc/passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
        self.write("etc/group", "root:x:0:\nnogroup:x:65534:\n")
        self.write("etc/shadow", "root:*:19000:0:99999:7:::\n")
        self.write("bin/bash", "")
        self.system = RecordingSystem(self.root)
        # What the agent knows of its SSH server and of an adoption is the module's: each test its own.
        self.patch(login_module, "SERVER", login_module._Server())
        self.patch(login_module, "INHERITED", login_module._Inherited())
        self.start_session({"login": type("Handler", (LoginHandler,), {"system": self.system})})
        self.handshake()

    def write(self, relative: str, text: str) -> None:
        with open(os.path.join(self.root, relative), "w") as stream:
            stream.write(text)

    def read(self, relative: str) -> str:
        with open(os.path.join(self.root, relative)) as stream:
            return stream.read()

    def login(self, user: Any, keys: str) -> list[Any]:
        stream_id = self.host.next_stream_id()
        events: list[Any] = [Open(stream_id, {"op": "login", "user": user})]
        if keys:
            events.append(Data(stream_id, keys.encode()))
        self.send(*events, HalfClose(stream_id))
        return self.receive()

    def answer(self, events: list[Any]) -> Any:
        data, end = events
        assert isinstance(data, Data)
        self.assertIsInstance(end, HalfClose)
        return json.loads(data.data)

    def test_root_with_keys(self) -> None:
        """Root's keys go to /root/.ssh/authorized_keys (0600 in 0700); the server is configured and started."""
        os.makedirs(os.path.join(self.root, "usr/sbin"))
        self.write("usr/sbin/sshd", "")
        os.chmod(os.path.join(self.root, "usr/sbin/sshd"), 0o755)
        answer = self.answer(self.login("root", KEY + "\n"))
        self.assertEqual(answer, {"user": "root", "uid": 0, "home": "/root", "created": False, "sshd": "started"})
        self.assertEqual(self.read("root/.ssh/authorized_keys"), KEY + "\n")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.root, "root/.ssh/authorized_keys")).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.root, "root/.ssh")).st_mode), 0o700)
        self.assertEqual([argv[0] for argv in self.system.ran], ["/usr/bin/ssh-keygen", "/usr/sbin/sshd"])
        self.assertEqual(self.system.ran[1], ["/usr/sbin/sshd", "-f", SSHD_CONFIG])
        self.assertEqual(self.read(SSHD_CONFIG.lstrip("/")), sshd_config("/etc/ssh/ssh_host_ed25519_key"))
        self.assertIn("PasswordAuthentication no", sshd_config("k"))
        # Again (a reconnection): the keys are rewritten, the server is left running.
        answer = self.answer(self.login("root", KEY + "\n"))
        self.assertEqual(answer["sshd"], "running")
        self.assertEqual(len(self.system.ran), 2)

    def test_login_before_the_inherited_keys_are_deleted(self) -> None:
        """
        A login that comes after a clone's or fork child's adoption but before its deferred work does not
        start the SSH server with the inherited host keys: it deletes them first, so the server's key is
        made anew; the deferred work then has nothing left to do.
        """
        login_module.INHERITED.keys = True
        os.makedirs(os.path.join(self.root, "usr/sbin"))
        self.write("usr/sbin/sshd", "")
        os.chmod(os.path.join(self.root, "usr/sbin/sshd"), 0o755)
        os.makedirs(os.path.join(self.root, "etc/ssh"))
        for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "ssh_host_ecdsa_key", "sshd_config"):
            self.write(f"etc/ssh/{name}", "template's\n")
        answer = self.answer(self.login("root", KEY + "\n"))
        self.assertEqual(answer["sshd"], "started")
        self.assertEqual(os.listdir(os.path.join(self.root, "etc/ssh")), ["sshd_config"])
        self.assertEqual([argv[0] for argv in self.system.ran], ["/usr/bin/ssh-keygen", "/usr/sbin/sshd"])
        self.assertEqual(login_module.renew_host_keys(self.system), "")
        self.assertEqual(len(self.system.ran), 2)

    def test_new_user(self) -> None:
        """A missing user is created: passwd, group, shadow (no password), a home it owns; keys in it."""
        answer = self.answer(self.login("alice", KEY + "\n"))
        self.assertEqual(answer, {"user": "alice", "uid": 1000, "home": "/home/alice", "created": True, "sshd": "absent"})
        self.assertIn("alice:x:1000:1000::/home/alice:/bin/bash\n", self.read("etc/passwd"))
        self.assertIn("alice:x:1000:\n", self.read("etc/group"))
        self.assertIn("alice:*:", self.read("etc/shadow"))
        home = os.stat(os.path.join(self.root, "home/alice"))
        self.assertEqual((home.st_uid, home.st_gid), (1000, 1000))
        keys = os.stat(os.path.join(self.root, "home/alice/.ssh/authorized_keys"))
        self.assertEqual((keys.st_uid, stat.S_IMODE(keys.st_mode)), (1000, 0o600))
        self.assertEqual(self.system.ran, [])
        # Once only.
        self.assertFalse(self.answer(self.login("alice", KEY + "\n"))["created"])
        self.assertEqual([line for line in self.read("etc/passwd").splitlines() if line.startswith("alice:")],
                         ["alice:x:1000:1000::/home/alice:/bin/bash"])

    def test_no_keys(self) -> None:
        """Without keys the user is still made, and no SSH server is started."""
        answer = self.answer(self.login("bob", ""))
        self.assertEqual((answer["created"], answer["sshd"]), (True, "off"))
        self.assertFalse(os.path.exists(os.path.join(self.root, "home/bob/.ssh")))

    def test_ids_skip_used_ones(self) -> None:
        """The new user's id is the first from 1000 that no user or group has."""
        self.write("etc/passwd", self.read("etc/passwd") + "carol:x:1000:1000::/home/carol:/bin/sh\n")
        self.write("etc/group", self.read("etc/group") + "carol:x:1000:\nextra:x:1001:\n")
        self.assertEqual(ensure_user(self.system, "dave")[:2], (1002, 1002))

    def test_bad_user(self) -> None:
        """A user name that is not one resets with BAD_HEADER."""
        for user in (None, "", "Root", "a b", "x" * 33, "../etc", 3, "x" * 300):
            [reset] = self.login(user, KEY)
            assert isinstance(reset, Reset)
            self.assertEqual((reset.code, reset.reason), (ResetCode.BAD_HEADER, f"bad user name {user!r}"[:200]), user)
