# -*- test-case-name: tests.guest.test_secrets -*-
"""
The guest's ``secrets`` operation (:class:`~vmservice.guest.secrets.SecretsHandler`)
through a real session, placing files in a temporary directory.
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
from vmservice.guest.secrets import SecretsHandler, mount_point_type
from vmservice.wire import ResetCode
from vmservice.wire.events import Data, HalfClose, Open, Reset

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
tmpfs /run tmpfs rw,nosuid,nodev,mode=755 0 0
proc /proc proc rw 0 0
tmpfs /run/shm\\040x tmpfs rw 0 0
"""


class MountTests(SynchronousTestCase):
    def test_longest_mount_point_wins(self) -> None:
        """A path is on the file system of the longest mount point that contains it."""
        self.assertEqual(mount_point_type("/run/secrets", MOUNTS), "tmpfs")
        self.assertEqual(mount_point_type("/run", MOUNTS), "tmpfs")
        self.assertEqual(mount_point_type("/runner/x", MOUNTS), "ext4")
        self.assertEqual(mount_point_type("/var/lib/secrets", MOUNTS), "ext4")
        self.assertEqual(mount_point_type("/run/shm x/a", MOUNTS), "tmpfs")
        self.assertIsNone(mount_point_type("/x", "garbage\n"))


class SecretsTests(GuestSessionMixin, SynchronousTestCase):
    """``{"op": "secrets", "entries": [...]}`` with the contents as the body."""

    def setUp(self) -> None:
        self.directory = os.path.join(tempfile.mkdtemp(dir="/tmp"), "secrets")
        self.addCleanup(shutil.rmtree, os.path.dirname(self.directory))
        handler = type("Handler", (SecretsHandler,), {"directory": self.directory, "require_tmpfs": False})
        self.start_session({"secrets": handler})
        self.handshake()

    def place(self, *secrets: tuple[str, bytes, int, int, int]) -> list[Any]:
        """Send the secrets (name, data, mode, uid, gid) in one request; the agent's answer."""
        stream_id = self.host.next_stream_id()
        entries = [{"name": n, "size": len(d), "mode": m, "uid": u, "gid": g} for n, d, m, u, g in secrets]
        body = b"".join(d for _, d, _, _, _ in secrets)
        events: list[Any] = [Open(stream_id, {"op": "secrets", "entries": entries})]
        if body:
            events.append(Data(stream_id, body))
        self.send(*events, HalfClose(stream_id))
        return self.receive()

    def answer(self, events: list[Any]) -> Any:
        data, end = events
        assert isinstance(data, Data)
        self.assertIsInstance(end, HalfClose)
        return json.loads(data.data)

    def test_places_with_modes_and_owners(self) -> None:
        """Each secret is a file with its content, mode, uid and gid; the directory is 0755."""
        answer = self.answer(self.place(("db-password", b"hunter2\n", 0o400, 1234, 5678), ("api.key", b"k", 0o640, 0, 0)))
        self.assertEqual(answer, {"placed": ["db-password", "api.key"], "removed": []})
        info = os.stat(os.path.join(self.directory, "db-password"))
        self.assertEqual((stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid), (0o400, 1234, 5678))
        with open(os.path.join(self.directory, "db-password"), "rb") as stream:
            self.assertEqual(stream.read(), b"hunter2\n")
        self.assertEqual(stat.S_IMODE(os.stat(self.directory).st_mode), 0o755)
        self.assertEqual(sorted(os.listdir(self.directory)), ["api.key", "db-password"])

    def test_sync_replaces_and_removes(self) -> None:
        """A second request leaves exactly its secrets: changed content replaced, others removed."""
        self.answer(self.place(("a", b"1", 0o600, 0, 0), ("b", b"2", 0o600, 0, 0)))
        answer = self.answer(self.place(("a", b"one", 0o644, 0, 0)))
        self.assertEqual(answer, {"placed": ["a"], "removed": ["b"]})
        self.assertEqual(os.listdir(self.directory), ["a"])
        with open(os.path.join(self.directory, "a"), "rb") as stream:
            self.assertEqual(stream.read(), b"one")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.directory, "a")).st_mode), 0o644)
        self.assertEqual(self.answer(self.place()), {"placed": [], "removed": ["a"]})

    def test_empty_secret(self) -> None:
        """An empty secret is an empty file."""
        self.answer(self.place(("empty", b"", 0o600, 0, 0)))
        self.assertEqual(os.path.getsize(os.path.join(self.directory, "empty")), 0)

    def test_bad_requests(self) -> None:
        """Bad names, numbers, duplicates or a body of the wrong length reset with BAD_HEADER, touching nothing."""
        bad = [
            ([("../x", b"1", 0o600, 0, 0)], "bad secret name '../x'"),
            ([(".hidden", b"1", 0o600, 0, 0)], "bad secret name '.hidden'"),
            ([("a/b", b"1", 0o600, 0, 0)], "bad secret name 'a/b'"),
            ([("a", b"1", 0o10000, 0, 0)], "bad mode for secret 'a'"),
            ([("a", b"1", 0o600, -1, 0)], "bad uid for secret 'a'"),
            ([("a", b"1", 0o600, 0, 2**32)], "bad gid for secret 'a'"),
            ([("a", b"1", 0o600, 0, 0), ("a", b"2", 0o600, 0, 0)], "a secret is named twice"),
            ([("a", b"1", 0o600, 0, 0), ("b/", b"2", 0o600, 0, 0), ("a", b"2", 0o600, 0, 0)], "bad secret name 'b/'"),
        ]
        for secrets, reason in bad:
            [reset] = self.place(*secrets)
            assert isinstance(reset, Reset)
            self.assertEqual((reset.code, reset.reason), (ResetCode.BAD_HEADER, reason), secrets)
        for entries, reason in [
            ({}, "entries must be a list of at most 64"),
            ([{}] * 65, "entries must be a list of at most 64"),
            (["a"], "each entry must be an object"),
            ([{"name": "a", "size": 1, "mode": True, "uid": 0, "gid": 0}], "bad mode for secret 'a'"),
            ([{"name": "a", "mode": 0o10000}], "bad size for secret 'a'"),
        ]:
            stream_id = self.host.next_stream_id()
            self.send(Open(stream_id, {"op": "secrets", "entries": entries}), HalfClose(stream_id))
            [reset] = self.receive()
            assert isinstance(reset, Reset)
            self.assertEqual((reset.code, reset.reason), (ResetCode.BAD_HEADER, reason), entries)
        stream_id = self.host.next_stream_id()
        header = {"op": "secrets", "entries": [{"name": "a", "size": 5, "mode": 0o600, "uid": 0, "gid": 0}]}
        self.send(Open(stream_id, header), Data(stream_id, b"abc"), HalfClose(stream_id))
        [reset] = self.receive()
        assert isinstance(reset, Reset)
        self.assertEqual((reset.code, reset.reason),
                         (ResetCode.BAD_HEADER, "the body's length is not the sum of the entries' sizes"))
        self.assertFalse(os.path.exists(self.directory) and os.listdir(self.directory))

    def test_refuses_a_disk(self) -> None:
        """Where the directory is not on a tmpfs, nothing is written: secrets never reach a disk."""
        mounts = os.path.join(os.path.dirname(self.directory), "mounts")
        for kind in ("ext4", "tmpfs"):
            with open(mounts, "w") as stream:
                stream.write(f"/dev/vda / ext4 rw 0 0\ntmpfs {os.path.dirname(self.directory)} {kind} rw 0 0\n")
            handler = type("Handler", (SecretsHandler,), {"directory": self.directory, "mounts": mounts})
            self.session._handlers = {"secrets": handler}  # type: ignore[attr-defined]
            events = self.place(("a", b"1", 0o600, 0, 0))
            if kind == "ext4":
                [reset] = events
                assert isinstance(reset, Reset)
                self.assertIn("not on a tmpfs", reset.reason)
                self.assertEqual(os.listdir(self.directory), [])
            else:
                self.assertEqual(self.answer(events)["placed"], ["a"])
