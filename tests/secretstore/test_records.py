# -*- test-case-name: tests.secretstore.test_records -*-
"""
Tests for :mod:`vmservice.secretstore.records`: the names, sizes and
attributes a secret may have, as the store refuses others.
"""

from __future__ import annotations

import os

from tests.secretstore.stores import CONTENT, StoreCase
from vmservice.errors import BadRequest, NotFound
from vmservice.secretstore import MAX_SECRET_SIZE, SecretChange, SecretSpec


class RecordTests(StoreCase):
    def test_bad_names(self) -> None:
        """Path separators, dot-files, empty and over-long names are refused before anything is written."""
        for name in ("", ".hidden", "..", "a/b", "../x", "a\\b", "x" * 129, "sp ace", "é", "a\nb"):
            for call, args in ((self.store.create, (SecretSpec(name, CONTENT),)),
                               (self.store.update, (name, SecretChange(data=CONTENT))),
                               (self.store.delete, (name,))):
                error = self.error(BadRequest, call, *args)
                self.assertEqual(error.code, "invalid_secret_name", name)
            self.error(NotFound, self.store.get, name)
        self.store.create(SecretSpec("x" * 128, CONTENT))
        self.assertEqual(os.listdir(self.store.directory), ["x" * 128 + ".secret"])

    def test_size_limit(self) -> None:
        """1 MiB of content is a secret; one byte more is a 400 for create and update."""
        self.store.create(SecretSpec("big", b"\0" * MAX_SECRET_SIZE))
        self.assertEqual(len(self.store.get("big").data), MAX_SECRET_SIZE)
        error = self.error(BadRequest, self.store.create, SecretSpec("bigger", b"\0" * (MAX_SECRET_SIZE + 1)))
        self.assertEqual(error.code, "secret_too_large")
        error = self.error(BadRequest, self.store.update, "big", SecretChange(data=b"\0" * (MAX_SECRET_SIZE + 1)))
        self.assertEqual(error.code, "secret_too_large")
        self.assertEqual([m.name for m in self.store.list()], ["big"])

    def test_attributes_checked(self) -> None:
        """Permission bits above 0777 and ids above 4294967294 are refused."""
        for spec in (SecretSpec("k", CONTENT, permissions=0o1777), SecretSpec("k", CONTENT, uid=2**32 - 1),
                     SecretSpec("k", CONTENT, gid=-1)):
            self.assertEqual(self.error(BadRequest, self.store.create, spec).code, "invalid_secret")
        self.assertEqual(self.store.list(), [])
