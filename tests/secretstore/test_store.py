# -*- test-case-name: tests.secretstore.test_store -*-
"""
Tests for :mod:`vmservice.secretstore.store`: files and modes, atomic writes,
limits, errors that never carry content, and the subscribers.
"""

from __future__ import annotations

import errno
import os
import stat
from datetime import datetime, timezone

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.log_capture import assert_never_logged, captured_log, logged_text
from tests.secretstore.stores import CONTENT, StoreCase
from vmservice import durable
from vmservice.errors import BadRequest, Conflict, Internal, NotFound, ServiceError, StateDirFull
from vmservice.nodes.provisioning import SecretSource, guest_secrets
from vmservice.secretstore import SecretChange, SecretSpec, SecretStore
from vmservice.secretstore import store as store_module


class SecretStoreTests(StoreCase):
    def test_directory_and_file_modes(self) -> None:
        """The directory is 0700 (also when it existed looser) and each secret's file is 0600."""
        self.assertEqual(stat.S_IMODE(os.stat(self.store.directory).st_mode), 0o700)
        self.store.create(SecretSpec("db-password", CONTENT, permissions=0o444))
        path = os.path.join(self.store.directory, "db-password.secret")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        os.chmod(self.store.directory, 0o755)
        SecretStore(self.state_dir, self.clock)
        self.assertEqual(stat.S_IMODE(os.stat(self.store.directory).st_mode), 0o700)

    def test_create_get_list(self) -> None:
        """A created secret is read back whole, and listed with its metadata only."""
        meta = self.store.create(SecretSpec("api.token", CONTENT, permissions=0o440, uid=1000, gid=1001))
        self.assertEqual(meta.mod_time, datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc))
        secret = self.store.get("api.token")
        self.assertEqual((secret.data, secret.meta), (CONTENT, meta))
        self.assertEqual((meta.size, meta.permissions, meta.uid, meta.gid), (len(CONTENT), 0o440, 1000, 1001))
        self.assertNotIn("hunter2", repr(secret))
        self.store.create(SecretSpec("a", b""))
        self.assertEqual([m.name for m in self.store.list()], ["a", "api.token"])
        self.assertEqual(self.store.get("a").meta.permissions, 0o600)
        self.assertEqual(self.changed, ["api.token", "a"])

    def test_survives_a_restart(self) -> None:
        """A new store on the same directory (the next daemon) finds the secrets as they were."""
        self.store.create(SecretSpec("k", CONTENT, uid=7))
        again = SecretStore(self.state_dir, self.clock)
        self.assertEqual(again.get("k"), self.store.get("k"))

    def test_exists(self) -> None:
        """Creating a name that exists is a 409 and leaves the secret as it was."""
        self.store.create(SecretSpec("k", CONTENT))
        error = self.error(Conflict, self.store.create, SecretSpec("k", b"other"))
        self.assertEqual(error.code, "secret_exists")
        self.assertEqual(self.store.get("k").data, CONTENT)
        self.assertEqual(self.changed, ["k"])

    def test_count_limit(self) -> None:
        """The store holds at most MAX_SECRETS; past it create is a 400, and after a delete it has room again."""
        self.patch(store_module, "MAX_SECRETS", 3)
        for name in "abc":
            self.store.create(SecretSpec(name, CONTENT))
        error = self.error(BadRequest, self.store.create, SecretSpec("d", CONTENT))
        self.assertEqual(error.code, "too_many_secrets")
        self.store.delete("a")
        self.store.create(SecretSpec("d", CONTENT))

    def test_update(self) -> None:
        """An update changes only what it gives, moves mod_time and tells the subscribers; an empty one changes nothing."""
        self.store.create(SecretSpec("k", CONTENT, permissions=0o400, uid=5, gid=6))
        self.clock.advance(60)
        meta = self.store.update("k", SecretChange(uid=9))
        self.assertEqual((meta.size, meta.permissions, meta.uid, meta.gid), (len(CONTENT), 0o400, 9, 6))
        self.assertEqual(meta.mod_time.timestamp(), 1_700_000_060)
        self.assertEqual(self.store.get("k").data, CONTENT)
        meta = self.store.update("k", SecretChange(data=b"new", permissions=0o640))
        self.assertEqual((self.store.get("k").data, meta.size, meta.permissions), (b"new", 3, 0o640))
        self.clock.advance(60)
        self.assertEqual(self.store.update("k", SecretChange()), meta)
        self.assertEqual(self.changed, ["k", "k", "k"])

    def test_not_found(self) -> None:
        """Update and delete of a name never stored are 404s that tell no subscriber."""
        self.assertEqual(self.error(NotFound, self.store.update, "nope", SecretChange(data=b"x")).code,
                         "secret_not_found")
        self.assertEqual(self.error(NotFound, self.store.delete, "nope").code, "secret_not_found")
        self.assertEqual(self.changed, [])

    def test_delete(self) -> None:
        """A deleted secret's file is gone, it is no longer listed or found, and the subscribers are told."""
        self.store.create(SecretSpec("k", CONTENT))
        self.store.delete("k")
        self.assertEqual(os.listdir(self.store.directory), [])
        self.assertEqual(self.store.list(), [])
        self.error(NotFound, self.store.get, "k")
        self.assertEqual(self.changed, ["k", "k"])

    def test_atomic_write(self) -> None:
        """A write that fails half-way leaves the old secret whole and no temporary file; 500 secret_store_failed."""
        self.store.create(SecretSpec("k", CONTENT))

        def fail(partial: str, final: str) -> None:
            raise OSError(errno.EIO, "Input/output error")

        self.patch(durable, "commit", fail)
        error = self.error(Internal, self.store.update, "k", SecretChange(data=b"hunter2-new-content"))
        self.assertEqual(error.code, "secret_store_failed")
        self.assertIn("Input/output error", str(error))
        self.assertEqual(self.store.get("k").data, CONTENT)
        self.assertEqual(os.listdir(self.store.directory), ["k.secret"])
        self.assertEqual(self.changed, ["k"])

    def test_no_room(self) -> None:
        """
        A write the state directory has no room for (ENOSPC, EDQUOT) is 507
        state_dir_full, never a 500: a new secret is not there, a changed one is
        as it was, no temporary file is left, and no subscriber hears of it.
        """
        self.store.create(SecretSpec("k", CONTENT))
        for number in (errno.ENOSPC, errno.EDQUOT):
            def fail(partial: str, final: str, number: int = number) -> None:
                raise OSError(number, os.strerror(number))

            self.patch(durable, "commit", fail)
            error = self.error(StateDirFull, self.store.create, SecretSpec("new", CONTENT))
            self.assertEqual((error.status, error.code), (507, "state_dir_full"))
            self.assertIn(os.strerror(number), str(error))
            self.error(StateDirFull, self.store.update, "k", SecretChange(data=b"hunter2-new-content"))
        self.assertEqual(self.store.get("k").data, CONTENT)
        self.error(NotFound, self.store.get, "new")
        self.assertEqual(os.listdir(self.store.directory), ["k.secret"])
        self.assertEqual(self.changed, ["k"])

    def test_crash_leftovers_removed(self) -> None:
        """A temporary file a crash left beside a secret is removed at start and never listed."""
        self.store.create(SecretSpec("k", CONTENT))
        for name in ("k.secret.tmp4242", ".k.secret.0123456789abcdef.tmp"):  # an earlier version's, this one's
            with open(os.path.join(self.store.directory, name), "wb") as f:
                f.write(b"half")
        self.assertEqual([m.name for m in self.store.list()], ["k"])
        SecretStore(self.state_dir, self.clock)
        self.assertEqual(os.listdir(self.store.directory), ["k.secret"])

    def test_damaged_file(self) -> None:
        """A damaged file is left out of the listing and is a 500 when read; others stay readable."""
        self.store.create(SecretSpec("good", CONTENT))
        for name, text in (("bad", b"not json\nxx"), ("short", b'{"name": "short", "size": 10, "permissions": 384, '
                                                               b'"uid": 0, "gid": 0, "mod_time": "2026-01-01T00:00:00"}\nxx')):
            with open(os.path.join(self.store.directory, name + ".secret"), "wb") as f:
                f.write(text)
        self.assertEqual([m.name for m in self.store.list()], ["good"])
        self.assertEqual(self.error(Internal, self.store.get, "bad").code, "secret_store_failed")
        self.assertEqual(self.error(Internal, self.store.get, "short").code, "secret_store_failed")

    def test_unreadable_directory(self) -> None:
        """A store whose directory is gone answers 500 secret_store_failed to a listing."""
        os.rmdir(self.store.directory)
        self.assertEqual(self.error(Internal, self.store.list).code, "secret_store_failed")

    def test_resolve(self) -> None:
        """resolve() gives the secrets in order, or one 400 naming every unknown one."""
        self.store.create(SecretSpec("a", b"1"))
        self.store.create(SecretSpec("b", b"2"))
        self.assertEqual([s.data for s in self.store.resolve(["b", "a"])], [b"2", b"1"])
        error = self.error(BadRequest, self.store.resolve, ["a", "x", "y"])
        self.assertEqual(error.code, "unknown_secret")
        self.assertIn("x, y", str(error))

    def test_source_of_guest_secrets(self) -> None:
        """The store is the node layer's SecretSource: guest_secrets reads content and attributes, skipping deleted ones."""
        source: SecretSource = self.store
        self.store.create(SecretSpec("a", b"1", permissions=0o400, uid=3, gid=4))
        placed = guest_secrets(source, ("a", "gone"))
        self.assertEqual([(s.name, s.data, s.mode, s.uid, s.gid) for s in placed], [("a", b"1", 0o400, 3, 4)])

    def test_unsubscribe_and_failing_subscriber(self) -> None:
        """A stopped subscriber is told nothing more; one that raises does not stop the change or the others."""
        def broken(name: str) -> None:
            raise RuntimeError("boom")

        stop = self.store.subscribe(broken)
        self.store.create(SecretSpec("a", b"1"))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        stop()
        self.store.delete("a")
        self.assertEqual(self.changed, ["a", "a"])


class NeverLoggedTests(SynchronousTestCase):
    """
    The store logs what happens to a secret, never its content, on every path: create, update (content
    and attributes), read, resolve, delete, a failing subscriber, a damaged file.
    """

    def test_content_never_logged(self) -> None:
        """Every change is logged by name and size only; the content, in any form, is in no event."""
        secret = b"hunter2-never-logged-\x01\xff"
        other = b"second-never-logged-content"
        events = captured_log(self)
        store = SecretStore(self.mktemp(), Clock())

        def broken(name: str) -> None:
            raise RuntimeError(f"subscriber failed on {name}")

        store.subscribe(broken)
        store.create(SecretSpec("db", secret))
        store.update("db", SecretChange(data=other))
        store.update("db", SecretChange(permissions=0o400))
        self.assertEqual(store.get("db").data, other)
        store.resolve(["db"])
        store.delete("db")
        store.create(SecretSpec("damaged", secret))
        with open(os.path.join(store.directory, "damaged.secret"), "r+b") as stream:
            stream.write(b"{not json")
        self.assertRaises(ServiceError, store.get, "damaged")
        self.flushLoggedErrors(RuntimeError)
        text = logged_text(events)
        for line in ("secret db created (", "secret db updated (", "secret db deleted", "damaged"):
            self.assertIn(line, text)
        for content in (secret, other):
            assert_never_logged(self, events, content)
