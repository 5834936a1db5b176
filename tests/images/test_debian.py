# -*- test-case-name: tests.images.test_debian -*-
"""
Tests for :mod:`vmservice.images.debian`, with a fake command runner that plays apt and dpkg.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from twisted.trial.unittest import SynchronousTestCase

from vmservice.images.debian import (AptError, DebFile, deb_file_name, fetch_packages, read_deb_fields,
                                     resolve_dependencies, resolve_metapackage, unpack)

APT_DEPENDS = """\
linux-image-cloud-amd64
  Depends: linux-image-6.1.0-56-cloud-amd64
"""

CANDIDATES = {"bash": ("5.2.15-2+b13", "amd64"), "busybox-static": ("1:1.35.0-4+deb12u1+b1", "amd64"),
              "tzdata": ("2024a-0+deb12u1", "all")}


class FakeApt:
    """
    Answers apt-cache, apt-get download and dpkg-deb like the real tools, for the packages in
    :data:`CANDIDATES`; records every command.
    """

    def __init__(self, known_after_update: bool = False) -> None:
        self.commands: list[tuple[list[str], str | None]] = []
        self.lists_present = not known_after_update

    def __call__(self, argv: Sequence[str], cwd: str | None) -> str:
        argv = list(argv)
        self.commands.append((argv, cwd))
        if argv[:2] == ["apt-cache", "depends"]:
            return APT_DEPENDS
        if argv[:2] == ["apt-get", "update"]:
            self.lists_present = True
            return ""
        if argv[:2] == ["apt-cache", "show"]:
            if not self.lists_present:
                raise AptError("E: No packages found")
            records = []
            for name in argv[3:]:
                if name in CANDIDATES:
                    version, arch = CANDIDATES[name]
                    records.append(f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\n"
                                   f"Description: a package\n with a long description\n")
            return "\n".join(records)
        if argv[:2] == ["apt-get", "download"]:
            assert cwd is not None
            for spec in argv[2:]:
                if spec.startswith("-") or spec.startswith("APT::"):
                    continue
                name, _, version = spec.partition("=")
                with open(os.path.join(cwd, deb_file_name(name, version, CANDIDATES[name][1])), "w") as stream:
                    stream.write(f"{name}\n{version}\n")
            return ""
        if argv[:2] == ["dpkg-deb", "-f"]:
            with open(argv[2]) as stream:
                lines = stream.read().splitlines()
            if len(lines) < 2:
                raise AptError("dpkg-deb: not a Debian format archive")
            return f"Package: {lines[0]}\nVersion: {lines[1]}\n"
        if argv[:2] == ["dpkg-deb", "-x"]:
            return ""
        raise AssertionError(f"unexpected command {argv}")

    def downloads(self) -> list[list[str]]:
        return [argv for argv, _cwd in self.commands if argv[:2] == ["apt-get", "download"]]


class DebianTests(SynchronousTestCase):
    """
    Resolving, fetching and unpacking.
    """

    def setUp(self) -> None:
        self.cache = os.path.abspath(self.mktemp())
        self.lines: list[str] = []

    def test_resolve_metapackage(self) -> None:
        """
        The metapackage resolves to the package it depends on.
        """
        self.assertEqual(resolve_metapackage("linux-image-cloud-amd64", FakeApt()),
                         "linux-image-6.1.0-56-cloud-amd64")

    def test_resolve_nothing(self) -> None:
        """
        A metapackage without dependencies is an AptError.
        """
        self.assertRaises(AptError, resolve_metapackage, "x", lambda argv, cwd: "x\n")

    def test_file_name(self) -> None:
        """
        The epoch's colon is escaped as apt-get download does.
        """
        self.assertEqual(deb_file_name("busybox-static", "1:1.35.0-4", "amd64"), "busybox-static_1%3a1.35.0-4_amd64.deb")

    def test_fetch_then_reuse(self) -> None:
        """
        The first fetch downloads every package into the cache in one apt-get call, pinned to the
        candidate version; the second downloads nothing. Versions come from the files.
        """
        apt = FakeApt()
        debs = fetch_packages(["bash", "busybox-static", "bash"], self.cache, apt, self.lines.append)
        self.assertEqual(debs, [
            DebFile("bash", "5.2.15-2+b13", os.path.join(self.cache, "bash_5.2.15-2+b13_amd64.deb")),
            DebFile("busybox-static", "1:1.35.0-4+deb12u1+b1",
                    os.path.join(self.cache, "busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb"))])
        [download] = apt.downloads()
        self.assertIn("bash=5.2.15-2+b13", download)
        self.assertIn("busybox-static=1:1.35.0-4+deb12u1+b1", download)
        self.assertEqual(self.lines, ["fetching 2 packages (2 to download, 0 cached)"])
        apt2 = FakeApt()
        self.assertEqual(fetch_packages(["bash", "busybox-static"], self.cache, apt2, self.lines.append), debs)
        self.assertEqual(apt2.downloads(), [])
        self.assertEqual(self.lines[-1], "fetching 2 packages (0 to download, 2 cached)")

    def test_damaged_cache_file(self) -> None:
        """
        A cached file that dpkg-deb cannot read (a download cut short) is fetched again.
        """
        fetch_packages(["bash"], self.cache, FakeApt(), self.lines.append)
        with open(os.path.join(self.cache, "bash_5.2.15-2+b13_amd64.deb"), "w") as stream:
            stream.write("trunc")
        apt = FakeApt()
        [deb] = fetch_packages(["bash"], self.cache, apt, self.lines.append)
        self.assertEqual(len(apt.downloads()), 1)
        self.assertEqual(read_deb_fields(deb.path, apt), ("bash", "5.2.15-2+b13"))

    def test_update_when_lists_missing(self) -> None:
        """
        When apt knows nothing (package lists never fetched), apt-get update runs once and the fetch goes on.
        """
        apt = FakeApt(known_after_update=True)
        [deb] = fetch_packages(["tzdata"], self.cache, apt, self.lines.append)
        self.assertEqual(deb.path, os.path.join(self.cache, "tzdata_2024a-0+deb12u1_all.deb"))
        self.assertEqual([argv[:2] for argv, _ in apt.commands].count(["apt-get", "update"]), 1)

    def test_unknown_package(self) -> None:
        """
        A package apt does not know is an AptError naming it.
        """
        error = self.assertRaises(AptError, fetch_packages, ["nosuch"], self.cache, FakeApt(), self.lines.append)
        self.assertIn("nosuch", str(error))

    def test_unpack(self) -> None:
        """
        Each package is unpacked with dpkg-deb -x into the destination, in order.
        """
        apt = FakeApt()
        debs = [DebFile("a", "1", "/c/a.deb"), DebFile("b", "2", "/c/b.deb")]
        destination = os.path.abspath(self.mktemp())
        unpack(debs, destination, apt)
        self.assertEqual([argv for argv, _ in apt.commands],
                         [["dpkg-deb", "-x", "/c/a.deb", destination], ["dpkg-deb", "-x", "/c/b.deb", destination]])
        self.assertTrue(os.path.isdir(destination))


#: ``apt-cache depends --recurse`` as apt prints it: or-groups (``|Depends``), virtual packages with
#: their providers, ``:any`` and foreign-architecture qualifiers, and virtual packages' own entries.
RECURSIVE_DEPENDS = """\
git
  Depends: libc6
  Depends: <perl:any>
    perl
  Depends: libfoo:i386
  Depends: git-man
  Depends: git-man
ca-certificates
  Depends: openssl
 |Depends: debconf
  Depends: <debconf-2.0>
    cdebconf
    debconf
openssh-server
  PreDepends: init-system-helpers
  Depends: lsb-base
    sysvinit-utils
 |Depends: <awk>
    mawk
    gawk
  Depends: gawk
libc6
  Depends: libgcc-s1
perl
  PreDepends: dpkg
  Depends: perl-base
git-man
openssl
  Depends: libc6
  Depends: libssl3
libssl3
  Depends: libc6
libgcc-s1
  Depends: libc6
perl-base
mawk
gawk
  Depends: libc6
lsb-base
  Depends: sysvinit-utils
sysvinit-utils
  Depends: libc6
cdebconf
  Depends: libnewt
<perl:any>
<debconf-2.0>
"""


def fake_depends(output: str) -> tuple[list[list[str]], Callable[[Sequence[str], str | None], str]]:
    commands: list[list[str]] = []

    def run(argv: Sequence[str], cwd: str | None) -> str:
        commands.append(list(argv))
        if list(argv) == ["dpkg", "--print-architecture"]:
            return "amd64\n"
        if argv[:2] == ["apt-cache", "depends"]:
            return output
        raise AssertionError(f"unexpected command {argv}")

    return commands, run


class ResolveDependenciesTests(SynchronousTestCase):
    """
    Completing a package list with what it depends on, from a recorded ``apt-cache depends --recurse``.
    """

    def test_closure(self) -> None:
        """
        The packages come first, then what they need in the order found: first alternatives, providers of
        virtual packages, one package per name; excluded packages and what only they need are left out;
        a dependency of another architecture is ignored.
        """
        commands, run = fake_depends(RECURSIVE_DEPENDS)
        resolved = resolve_dependencies(["git", "ca-certificates", "openssh-server"],
                                        ["dpkg", "debconf", "init-system-helpers"], run)
        self.assertEqual(resolved, ["git", "ca-certificates", "openssh-server", "libc6", "perl", "git-man",
                                    "openssl", "lsb-base", "mawk", "libgcc-s1", "perl-base", "libssl3",
                                    "sysvinit-utils"])
        self.assertEqual(commands[0], ["dpkg", "--print-architecture"])
        depends = commands[1]
        self.assertEqual(depends[:3], ["apt-cache", "depends", "--recurse"])
        for option in ("--no-recommends", "--no-suggests", "APT::Architectures=amd64"):
            self.assertIn(option, depends)
        self.assertEqual(depends[-3:], ["git", "ca-certificates", "openssh-server"])

    def test_provider_already_chosen(self) -> None:
        """
        A virtual dependency is satisfied by a provider the set already has, not by its first provider.
        """
        _commands, run = fake_depends(RECURSIVE_DEPENDS)
        resolved = resolve_dependencies(["gawk", "openssh-server"], ["dpkg", "init-system-helpers"], run)
        self.assertNotIn("mawk", resolved)
        self.assertNotIn("cdebconf", resolve_dependencies(["ca-certificates"], [], run))

    def test_without_exclusions(self) -> None:
        """
        Without exclusions, Pre-Depends count as much as Depends.
        """
        _commands, run = fake_depends(RECURSIVE_DEPENDS)
        resolved = resolve_dependencies(["perl"], [], run)
        self.assertEqual(resolved, ["perl", "dpkg", "perl-base"])

    def test_unsatisfiable(self) -> None:
        """
        A dependency on a virtual package nothing provides is an AptError naming both packages.
        """
        _commands, run = fake_depends("foo\n  Depends: <bar>\n<bar>\n")
        with self.assertRaises(AptError) as raised:
            resolve_dependencies(["foo"], [], run)
        self.assertIn("foo depends on bar", str(raised.exception))
