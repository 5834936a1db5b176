"""
Tests for :mod:`vmservice.devcluster.sources`: deb-src lists derived from the machine's.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.sources import (SOURCES_FILE, SOURCES_FILE_ONE_LINE, deb822_sources, one_line_sources,
                                          source_lists)

DEB822 = """\
# The machine's lists.
Types: deb
# a mirror's snapshot
URIs: http://archive.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg


Types: deb
URIs: http://archive.example/debian-security
Suites: bookworm-security
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://other.example/debian
Suites: bookworm
Components: main

Types: deb-src
URIs: http://third.example/debian
Suites: bookworm
Components: main
"""


class Deb822Tests(SynchronousTestCase):
    def test_types_only_change(self) -> None:
        """Each deb stanza comes back with Types: deb-src and every other line (comments too) as it was."""
        self.assertEqual(deb822_sources(DEB822), """\
# The machine's lists.
Types: deb-src
# a mirror's snapshot
URIs: http://archive.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://archive.example/debian-security
Suites: bookworm-security
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
""")

    def test_nothing_to_derive(self) -> None:
        """Lists with sources already (or nothing) give nothing."""
        self.assertEqual(deb822_sources("Types: deb-src\nURIs: http://a.example/\n"), "")
        self.assertEqual(deb822_sources("# only a comment\n"), "")

    def test_embedded_key_kept(self) -> None:
        """A Signed-By holding a key (continuation lines) is kept line for line."""
        text = "Types: deb\nURIs: http://a.example/\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n"
        self.assertEqual(deb822_sources(text), text.replace("Types: deb", "Types: deb-src"))

    @given(st.lists(st.lists(st.from_regex(r"\A(URIs|Suites|Components|Signed-By|# note): [a-z:/.]{1,20}\Z"),
                             min_size=1, max_size=5), min_size=1, max_size=4))
    @settings(max_examples=100, deadline=None)
    def test_property_only_types(self, stanzas: list[list[str]]) -> None:
        """For any deb stanzas, the derived text is the same lines with each Types line replaced."""
        text = "\n\n".join("\n".join(["Types: deb", *lines]) for lines in stanzas) + "\n"
        derived = deb822_sources(text)
        self.assertEqual(derived.replace("Types: deb-src", "Types: deb"), text)


class OneLineTests(SynchronousTestCase):
    def test_deb_lines(self) -> None:
        """Each deb line becomes a deb-src line (options kept); one that has its deb-src already does not."""
        text = ("# comment\ndeb [signed-by=/k.gpg] http://a.example/debian bookworm main\n"
                "deb http://b.example/debian bookworm main\ndeb-src http://b.example/debian bookworm main\n")
        self.assertEqual(one_line_sources(text), "deb-src [signed-by=/k.gpg] http://a.example/debian bookworm main\n")


class SourceListsTests(SynchronousTestCase):
    def _root(self, files: dict[str, str]) -> str:
        root = self.mktemp()
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        return root

    def test_deb822_first(self) -> None:
        """The deb822 list is used when there is one, giving the .sources file."""
        root = self._root({"etc/apt/sources.list.d/debian.sources": DEB822, "etc/apt/sources.list": "deb http://x/ y z\n"})
        path, text = source_lists(root)
        self.assertEqual((path, text), (SOURCES_FILE, deb822_sources(DEB822)))

    def test_one_line_otherwise(self) -> None:
        """Without a deb822 list the one-line list gives the .list file."""
        path, text = source_lists(self._root({"etc/apt/sources.list": "deb http://x.example/ y z\n"}))
        self.assertEqual((path, text), (SOURCES_FILE_ONE_LINE, "deb-src http://x.example/ y z\n"))
