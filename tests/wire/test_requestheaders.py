# -*- test-case-name: tests.wire.test_requestheaders -*-
"""
Tests for the request-style headers of :mod:`vmservice.wire.openheaders`
(file-system requests): every record comes back from its own JSON, no JSON
value makes a reader raise anything but ``BadHeader``, and the refusals are
the words the guest has always sent, in the order it has always checked.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.wire.headerchecks import any_texts, read_all, refusal, texts, through_json
from tests.wire.strategies import headers, json_values
from vmservice.wire.openheaders.fs import ACTIONS, FsHeader

paths = st.just("~") | st.sampled_from(["/", "~/"]).flatmap(lambda head: texts.map(lambda tail: head + tail)).filter(
    lambda path: "\x00" not in path)
fs_headers = (
    st.builds(FsHeader, action=st.sampled_from(["stat", "readdir"]), path=paths)
    | st.builds(FsHeader, action=st.just("remove"), path=paths, recursive=st.booleans())
    | st.builds(FsHeader, action=st.just("mkdir"), path=paths, recursive=st.booleans(),
                mode=st.integers(min_value=0, max_value=0o7777))
)

#: Every reader of untrusted JSON, and every field one looks at.
READERS = [FsHeader.from_json]
FIELDS = ["action", "path", "recursive", "mode"]


class FsHeaderTests(SynchronousTestCase):
    """:class:`FsHeader`: one file-system request."""

    @given(fs_headers)
    def test_round_trip(self, header: FsHeader) -> None:
        """Every record comes back unchanged from its JSON, which names its op."""
        sent = through_json(header.to_json())
        self.assertEqual(sent["op"], "fs")
        self.assertEqual(FsHeader.from_json(sent), header)

    @given(json_values)
    def test_any_json(self, value: Any) -> None:
        """Any JSON value: a record or BadHeader."""
        read_all(READERS, value)

    @given(headers, st.sampled_from(FIELDS), json_values | any_texts,
           st.sampled_from([{}, *({"action": action, "path": "/"} for action in ACTIONS)]))
    def test_any_field(self, header: dict[str, Any], name: str, value: Any, base: dict[str, Any]) -> None:
        """An object with any value in a known field (and others besides): a record or BadHeader."""
        read_all(READERS, {**header, **base, name: value})

    def test_json(self) -> None:
        """recursive is sent for mkdir and remove, mode for mkdir only: the headers the host always sent."""
        self.assertEqual(FsHeader("stat", "/etc/hosts").to_json(), {"op": "fs", "action": "stat", "path": "/etc/hosts"})
        self.assertEqual(FsHeader("readdir", "~").to_json(), {"op": "fs", "action": "readdir", "path": "~"})
        self.assertEqual(FsHeader("mkdir", "/a", True, 0o700).to_json(),
                         {"op": "fs", "action": "mkdir", "path": "/a", "recursive": True, "mode": 0o700})
        self.assertEqual(FsHeader("remove", "/a").to_json(),
                         {"op": "fs", "action": "remove", "path": "/a", "recursive": False})

    def test_messages(self) -> None:
        """Each wrong field is named; the first wrong one wins: action, path, mode, recursive."""
        for header, message in [
            ({"path": 1}, "unknown action None"),
            ({"action": ["stat"]}, "unknown action ['stat']"),
            ({"action": "stat"}, "path is required"),
            ({"action": "stat", "path": "/\x00"}, "path must not contain NUL"),
            ({"action": "mkdir", "path": "x", "mode": -1}, "path must be absolute: 'x'"),
            ({"action": "mkdir", "path": "/", "mode": True, "recursive": 0}, "mode must be an integer from 0 to 0o7777"),
            ({"action": "mkdir", "path": "/", "mode": 0o10000}, "mode must be an integer from 0 to 0o7777"),
            ({"action": "mkdir", "path": "/", "recursive": "yes"}, "recursive must be true or false"),
            ({"action": "remove", "path": "/", "recursive": 1}, "recursive must be true or false"),
        ]:
            self.assertEqual(refusal(FsHeader.from_json, header), message)

    def test_unread_fields(self) -> None:
        """stat and readdir read neither recursive nor mode, remove no mode: their defaults stand."""
        for action in ("stat", "readdir"):
            self.assertEqual(FsHeader.from_json({"action": action, "path": "/", "recursive": "x", "mode": "x"}),
                             FsHeader(action, "/"))
        self.assertEqual(FsHeader.from_json({"action": "remove", "path": "/", "recursive": True, "mode": "x"}),
                         FsHeader("remove", "/", True))
        self.assertEqual(FsHeader.from_json({"action": "mkdir", "path": "~"}), FsHeader("mkdir", "~", False, 0o755))
