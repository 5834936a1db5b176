# -*- test-case-name: tests.integration.test_e2b_image -*-
"""
The ``e2b`` image against a real daemon and guest: a warm clone of a 256 MB group of that image has what
code written for E2B's ``base`` template expects, checked through exec as uid and gid 1000 in ``~``:
the account ``user`` at home in ``/home/user``, umask 0022, ``sudo`` without a password, ``tput`` with
the terminal database, user extended attributes on the root file system, and bash login shells.

As for the dev image, a missing ``e2b`` image is built first (``make image`` builds it too).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from tests.integration.daemon import CREATE_TIMEOUT, TemplatesDaemonTestCase, ensure_image

#: One warm group of the e2b image, as conf/vmservice.yaml's ``e2b`` group.
GROUPS: list[dict[str, Any]] = [
    {"name": "e2b", "count": 0, "vcpu": 1, "ram_mb": 256, "storage_size": "1G", "warm": True, "image": "e2b"},
]


class E2bImageTests(TemplatesDaemonTestCase):
    """One warm clone of the e2b image, shared by the tests."""

    groups = GROUPS
    hostname: str
    timeout = 600

    @classmethod
    def start_shared(cls) -> None:
        # Built if missing, as the dev image is: the daemon refuses to start without its groups' images.
        ensure_image("e2b")
        super().start_shared()

    @classmethod
    def started(cls) -> None:
        """The group's template built by a first node (then deleted); the shared node is a warm clone."""
        first = cls.daemon.json("POST", f"/hostgroup/e2b/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {}, expect=201)
        cls.daemon.json("DELETE", f"/hostgroup/e2b/nodes/{first['hostname']}")
        created = cls.daemon.json("POST", f"/hostgroup/e2b/nodes?wait=agent&timeout={CREATE_TIMEOUT}", {},
                                  expect=201)
        cls.hostname = created["hostname"]

    def as_user(self, command: str) -> str:
        """Run ``command`` by bash as uid and gid 1000 in ``~``; its stdout, after checking it exited 0."""
        query = urlencode({"cmd": command, "uid": 1000, "gid": 1000, "cwd": "~", "buffered": "true"})
        result = self.daemon.json("POST", f"/vm/{self.hostname}/exec?{query}")
        self.assertEqual(result["exit_code"], 0, f"{command}: {result}")
        return str(result["stdout"])

    def test_account(self) -> None:
        """The user is ``user`` of group ``user``, at home in /home/user (its own, 0750), with umask 0022."""
        self.assertEqual(self.as_user("id -un; id -gn; pwd; umask; echo $HOME"),
                         "user\nuser\n/home/user\n0022\n/home/user\n")
        self.assertEqual(self.as_user("stat -c '%u:%g %a' /home/user"), "1000:1000 750\n")

    def test_sudo(self) -> None:
        """``sudo -n`` runs commands as root without a password (PAM, sudoers and the drop-in all work)."""
        self.assertEqual(self.as_user("sudo -n id -u"), "0\n")
        self.assertEqual(self.as_user("sudo -n true && echo done"), "done\n")

    def test_python3_and_tput(self) -> None:
        """python3 runs for the user, and ``tput`` finds xterm in the terminal database."""
        self.assertEqual(self.as_user("python3 -c 'print(1)'"), "1\n")
        self.assertRegex(self.as_user("TERM=xterm tput cols"), r"^\d+\n$")

    def test_user_xattr(self) -> None:
        """A file the user owns on the root file system takes a ``user.`` extended attribute."""
        self.assertEqual(self.as_user(
            "python3 -c 'import os; open(\"f\",\"w\").close(); os.setxattr(\"f\",\"user.e2b.k\",b\"v\");"
            " print(os.getxattr(\"f\",\"user.e2b.k\"))' && rm f"), "b'v'\n")

    def test_login_shell(self) -> None:
        """``bash -l -c`` reads the profile and keeps the user's home."""
        self.assertEqual(self.as_user("bash -l -c 'echo $HOME'"), "/home/user\n")
