"""Tests for :mod:`vmservice.e2b.sandbox` and :mod:`vmservice.e2b.store`: the records and their files."""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime, timezone

from twisted.trial.unittest import SynchronousTestCase

from tests.e2b.hosts import temporary_directory
from vmservice.e2b.sandbox import SANDBOX_ID, Sandbox, new_access_token, new_sandbox_id
from vmservice.e2b.store import SandboxStore

WHEN = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
SANDBOX = Sandbox("iabcdefghij0123456789"[:20], "base", "e2b", WHEN, WHEN, True, (("k", "v"), ("b", "")),
                  (("A", "1"),), "token")


class SandboxTests(SynchronousTestCase):
    def test_ids(self) -> None:
        """Ids: twenty characters, a letter first, each drawn anew; tokens long and random."""
        drawn = {new_sandbox_id() for _ in range(200)}
        self.assertEqual(len(drawn), 200)
        self.assertTrue(all(SANDBOX_ID.fullmatch(sandbox_id) for sandbox_id in drawn))
        self.assertEqual(new_sandbox_id(lambda letters: letters[-1]), "z" + "9" * 19)
        self.assertNotEqual(new_access_token(), new_access_token())

    def test_json(self) -> None:
        """A record and its JSON, both ways; what is no record is refused."""
        self.assertEqual(Sandbox.from_json(SANDBOX.as_json()), SANDBOX)
        for broken in ({}, {**SANDBOX.as_json(), "sandbox_id": "../x"}, {**SANDBOX.as_json(), "auto_pause": 1},
                       {**SANDBOX.as_json(), "metadata": {"k": 1}}, {**SANDBOX.as_json(), "end_at": "soon"}):
            self.assertRaises(ValueError, Sandbox.from_json, broken)
        naive = Sandbox.from_json({**SANDBOX.as_json(), "started_at": "2026-01-02T03:04:05.000006"})
        self.assertEqual(naive.started_at, WHEN)


class StoreTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = os.path.join(temporary_directory(self), "e2b")
        self.store = SandboxStore(self.directory)

    def test_private(self) -> None:
        """The directory 0700, each file 0600."""
        self.store.save(SANDBOX)
        self.assertEqual(stat.S_IMODE(os.stat(self.directory).st_mode), 0o700)
        path = os.path.join(self.directory, f"{SANDBOX.sandbox_id}.json")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)

    def test_save_load_remove(self) -> None:
        """Saved records read back (the latest write); removed ones do not; removing twice is fine."""
        self.store.save(SANDBOX)
        later = SANDBOX.ending(datetime(2027, 1, 1, tzinfo=timezone.utc))
        self.store.save(later)
        self.assertEqual(SandboxStore(self.directory).load(), [later])
        self.store.remove(SANDBOX.sandbox_id)
        self.store.remove(SANDBOX.sandbox_id)
        self.assertEqual(self.store.load(), [])
        self.assertRaises(ValueError, self.store.remove, "../../etc")

    def test_bad_files(self) -> None:
        """Files that are no records are left alone; a link is not followed."""
        self.store.save(SANDBOX)
        other = "ibbbbbbbbbbbbbbbbbbb"
        with open(os.path.join(self.directory, f"{other}.json"), "w") as f:
            json.dump(SANDBOX.as_json(), f)  # named for another sandbox
        with open(os.path.join(self.directory, "icccccccccccccccccc1.json"), "w") as f:
            f.write("{not json")
        os.symlink("/etc/hostname", os.path.join(self.directory, "iddddddddddddddddddd.json"))
        with open(os.path.join(self.directory, "notes.txt"), "w") as f:
            f.write("hello")
        self.assertEqual(self.store.load(), [SANDBOX])
