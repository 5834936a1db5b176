"""
Tests for :mod:`vmservice.devcluster.recipe`: the versions apt reports and the cache key.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.recipe import (KEY_PACKAGES, RECIPE_MODULES, RecipeError, cache_key, current_versions,
                                         parse_policy, recipe_sources)

POLICY = """\
kubernetes-client:
  Installed: (none)
  Candidate: 1.20.5+really1.20.2-1.1+deb12u1
  Version table:
     1.20.5+really1.20.2-1.1+deb12u1 500
        500 http://archive.example/debian bookworm/main amd64 Packages
golang-go:
  Installed: 2:1.19~1
  Candidate: 2:1.19~2
  Version table:
 *** 2:1.19~1 100
        100 /var/lib/dpkg/status
unknown-package:
  Installed: (none)
  Candidate: (none)
  Version table:
"""

VERSIONS = {"kubernetes-client": "1.20.2-1", "etcd-server": "3.4.23-4", "etcd-client": "3.4.23-4",
            "golang-go": "2:1.19~1"}
SOURCES = {"recipe.py": b"one", "build.py": b"two", "sources.py": b"three"}


class PolicyTests(SynchronousTestCase):
    def test_installed_else_candidate(self) -> None:
        """The installed version counts when there is one, else the candidate; a package without either is left out."""
        self.assertEqual(parse_policy(POLICY), {"kubernetes-client": "1.20.5+really1.20.2-1.1+deb12u1",
                                                "golang-go": "2:1.19~1"})

    def test_empty(self) -> None:
        """apt's answer for packages it does not know (nothing) gives no versions."""
        self.assertEqual(parse_policy(""), {})

    def test_current_versions_asks_for_the_key_packages(self) -> None:
        """current_versions asks apt-cache policy about exactly the packages of the key."""
        asked = []

        def run(argv: object) -> str:
            asked.append(argv)
            return POLICY

        current_versions(run)
        self.assertEqual(asked, [["apt-cache", "policy", *KEY_PACKAGES]])


class KeyTests(SynchronousTestCase):
    def test_shape(self) -> None:
        """A key is controlplane- and 20 hex digits, the same for the same recipe."""
        key = cache_key(SOURCES, VERSIONS)
        self.assertRegex(key, r"\Acontrolplane-[0-9a-f]{20}\Z")
        self.assertEqual(key, cache_key(dict(reversed(list(SOURCES.items()))), VERSIONS))

    def test_changes_with_the_recipe(self) -> None:
        """A change to a module's source changes the key."""
        self.assertNotEqual(cache_key(SOURCES, VERSIONS), cache_key({**SOURCES, "build.py": b"two!"}, VERSIONS))

    def test_module_boundaries(self) -> None:
        """Moving text from one module to the next changes the key (each source is framed by its length)."""
        self.assertNotEqual(cache_key({"a": b"xy", "b": b"z"}, VERSIONS), cache_key({"a": b"x", "b": b"yz"}, VERSIONS))

    @given(st.sampled_from(KEY_PACKAGES), st.text(min_size=1, max_size=20))
    @settings(max_examples=100, deadline=None)
    def test_changes_with_a_version(self, package: str, version: str) -> None:
        """Any other version of any package of the key gives another key."""
        if version == VERSIONS[package]:
            return
        self.assertNotEqual(cache_key(SOURCES, VERSIONS), cache_key(SOURCES, {**VERSIONS, package: version}))

    def test_missing_version(self) -> None:
        """A package apt knows no version of is a RecipeError naming it."""
        versions = dict(VERSIONS)
        del versions["etcd-server"]
        error = self.assertRaises(RecipeError, cache_key, SOURCES, versions)
        self.assertIn("etcd-server", str(error))

    def test_recipe_sources(self) -> None:
        """The recipe's sources are those of the build's modules, read from the package."""
        sources = recipe_sources()
        self.assertEqual(sorted(sources), sorted(RECIPE_MODULES))
        self.assertIn(b"def cache_key", sources["recipe.py"])
