"""
Tests for :mod:`vmservice.devcluster.build`: what makes an entry complete, and storing one whole or not at all
(the build itself runs for real: ``python -m vmservice.devcluster build``, and in the integration tests).
"""

from __future__ import annotations

import os
import stat

from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.build import BuildFailed, _remove_leftovers, _store, complete
from vmservice.devcluster.recipe import BINARIES


class EntryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.cache = self.mktemp()
        os.mkdir(self.cache, 0o700)
        self.built = os.path.join(self.cache, "built")
        os.mkdir(self.built)
        self.programs = {}
        for name in BINARIES:
            self.programs[name] = os.path.join(self.built, name)
            with open(self.programs[name], "w") as f:
                f.write(f"#!/bin/sh\necho {name}\n")

    def test_store_complete(self) -> None:
        """A stored entry has every program (0700) and its manifest (0600), and is complete."""
        entry = os.path.join(self.cache, "controlplane-0123")
        _store(entry, self.programs, {"key": "controlplane-0123"})
        self.assertTrue(complete(entry))
        for name in BINARIES:
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(entry, "bin", name)).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(entry, "manifest.json")).st_mode), 0o600)

    def test_store_missing_program(self) -> None:
        """A program the build did not make fails the store, which leaves no entry and no temporary one."""
        os.unlink(self.programs["kube-scheduler"])
        entry = os.path.join(self.cache, "controlplane-0123")
        error = self.assertRaises(BuildFailed, _store, entry, self.programs, {})
        self.assertIn("kube-scheduler", str(error))
        self.assertEqual(sorted(os.listdir(self.cache)), ["built"])

    def test_incomplete(self) -> None:
        """An entry without a program or without its manifest is not complete (nor is none)."""
        entry = os.path.join(self.cache, "controlplane-0123")
        self.assertFalse(complete(entry))
        _store(entry, self.programs, {})
        os.unlink(os.path.join(entry, "bin", "etcd"))
        self.assertFalse(complete(entry))

    def test_leftovers_removed(self) -> None:
        """What a killed build left (its build directory, a temporary entry) is removed; entries are kept."""
        for name in ("build-abc", ".entry-def", "controlplane-0123"):
            os.mkdir(os.path.join(self.cache, name))
        _remove_leftovers(self.cache)
        self.assertEqual(sorted(os.listdir(self.cache)), ["built", "controlplane-0123"])
