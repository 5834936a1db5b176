"""
Tests for :mod:`vmservice.devcluster.ports`: ``--ports`` and ``--nodes``, and free ports (with fake sockets).
"""

from __future__ import annotations

import socket
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.devcluster.ports import (DEFAULT_BASE, MAX_NODES, Ports, free_ports, parse_nodes, parse_ports,
                                        ports_from_base, ports_in_use)


class FakeSocket:
    """A socket that binds as told: port 0 gets the next of ``handed``; a port of ``busy`` fails."""

    def __init__(self, handed: list[int], busy: set[int]) -> None:
        self.handed, self.busy, self.port, self.closed = handed, busy, 0, False

    def setsockopt(self, *args: Any) -> None:
        pass

    def bind(self, address: tuple[str, int]) -> None:
        assert address[0] == "127.0.0.1"
        if address[1] in self.busy:
            raise OSError(98, "Address already in use")
        self.port = address[1] or self.handed.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> FakeSocket:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


class PortsTests(SynchronousTestCase):
    def test_auto(self) -> None:
        """auto is None: free ports."""
        self.assertIsNone(parse_ports("auto"))

    def test_base(self) -> None:
        """A base gives base, base + 1, ... in the order of Ports; the default leaves a real install's ports alone."""
        self.assertEqual(parse_ports("20000"), 20000)
        self.assertEqual(ports_from_base(20000), Ports(20000, 20001, 20002, 20003, 20004))
        default = set(range(DEFAULT_BASE, DEFAULT_BASE + 5))
        self.assertFalse(default & {6443, 2379, 2380, 10250, 10251, 10252, 10255, 10257, 10259})

    @given(st.one_of(st.text(max_size=8), st.integers().map(str)))
    @settings(max_examples=300, deadline=None)
    def test_property_parse(self, text: str) -> None:
        """Any text is auto, a base with room for five ports in 1024-65535, or a ValueError naming --ports."""
        try:
            base = parse_ports(text)
        except ValueError as error:
            self.assertIn("--ports", str(error))
            return
        if base is not None:
            self.assertTrue(1024 <= base and base + 4 <= 65535)
            self.assertEqual(str(base), text.lstrip("0") or "0")

    def test_bad(self) -> None:
        """Too low, too high, signs, spaces and words are refused."""
        for text in ("1023", "65532", "-1", "+2000", " 2000", "2000 ", "AUTO", "", "0x2000", "２０００"):
            self.assertRaises(ValueError, parse_ports, text)

    def test_free_ports(self) -> None:
        """Free ports: five sockets bound to loopback port 0 at once, then closed."""
        made: list[FakeSocket] = []
        handed = [40001, 40002, 40003, 40004, 40005]

        def make() -> FakeSocket:
            made.append(FakeSocket(handed, set()))
            return made[-1]

        self.assertEqual(free_ports(make), Ports(40001, 40002, 40003, 40004, 40005))  # type: ignore[arg-type]
        self.assertTrue(all(each.closed for each in made))

    def test_in_use(self) -> None:
        """Ports something holds are reported."""
        ports = ports_from_base(20000)
        self.assertEqual(ports_in_use(ports, lambda: FakeSocket([], {20001, 20004})), [20001, 20004])  # type: ignore[arg-type, return-value]
        self.assertEqual(ports_in_use(ports, lambda: FakeSocket([], set())), [])  # type: ignore[arg-type, return-value]


NAME = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]{1,5})?\Z")


class NodesTests(SynchronousTestCase):
    def test_names(self) -> None:
        """Names in their order."""
        self.assertEqual(parse_nodes("vms-a,vms-b,host1.example"), ("vms-a", "vms-b", "host1.example"))

    def test_bad(self) -> None:
        """Empty, upper case, slashes, dots at the ends, names too long, twice or too many are refused."""
        for text in ("", "vms-a,", "VMS", "../x", "a/b", "-a", "a-", ".a", "a..b", "a" * 64, "a,a",
                     ",".join(f"n{i}" for i in range(MAX_NODES + 1))):
            self.assertRaises(ValueError, parse_nodes, text)

    def test_many(self) -> None:
        """A scale benchmark's few hundred names are fine."""
        self.assertEqual(len(parse_nodes(",".join(f"sim-{i}" for i in range(500)))), 500)

    @given(st.lists(NAME, min_size=1, max_size=20, unique=True))
    @settings(max_examples=150, deadline=None)
    def test_property_round_trip(self, names: list[str]) -> None:
        """Any list of distinct valid names comes back as it was."""
        self.assertEqual(parse_nodes(",".join(names)), tuple(names))

    @given(st.text(max_size=30))
    @settings(max_examples=200, deadline=None)
    def test_property_safe(self, text: str) -> None:
        """Whatever is given, a name accepted is usable as a file name: no slash, no leading dot, no NUL."""
        try:
            names = parse_nodes(text)
        except ValueError:
            return
        for name in names:
            self.assertNotIn("/", name)
            self.assertFalse(name.startswith("."))
            self.assertNotIn("\0", name)
