# -*- test-case-name: tests.wire.test_requestheaders -*-
"""
Tests for the request-style headers of :mod:`vmservice.wire.openheaders`
(file-system requests, requests about background execs): every record comes back from its own JSON, no JSON
value makes a reader raise anything but ``BadHeader``, and the refusals are
the words the guest has always sent, in the order it has always checked.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.wire.headerchecks import any_texts, read_all, refusal, texts, through_json
from tests.wire.strategies import headers, json_values
from vmservice.wire.openheaders.background import (EXEC_REQUESTS, MAX_GRACE_MS, MAX_LOG_ID, MAX_WAIT_MS, SIGNAL_NAMES,
                                                   BackgroundDeleteHeader, BackgroundInfoHeader, BackgroundKillHeader,
                                                   BackgroundListHeader, BackgroundLogsHeader, BackgroundWaitHeader)
from vmservice.wire.openheaders.fs import ACTIONS, FsHeader

paths = st.just("~") | st.sampled_from(["/", "~/"]).flatmap(lambda head: texts.map(lambda tail: head + tail)).filter(
    lambda path: "\x00" not in path)
fs_headers = (
    st.builds(FsHeader, action=st.sampled_from(["stat", "readdir"]), path=paths)
    | st.builds(FsHeader, action=st.just("remove"), path=paths, recursive=st.booleans())
    | st.builds(FsHeader, action=st.just("mkdir"), path=paths, recursive=st.booleans(),
                mode=st.integers(min_value=0, max_value=0o7777))
)

background_requests = (
    st.just(BackgroundListHeader())
    | st.builds(BackgroundInfoHeader, texts)
    | st.builds(BackgroundDeleteHeader, texts)
    | st.builds(BackgroundKillHeader, texts, st.sampled_from(SIGNAL_NAMES), st.integers(0, MAX_GRACE_MS))
    | st.builds(BackgroundWaitHeader, texts, st.integers(0, MAX_WAIT_MS))
    | st.builds(BackgroundLogsHeader, texts, st.integers(0, MAX_LOG_ID), st.booleans())
)

#: Every reader of untrusted JSON, and every field one looks at.
READERS = [FsHeader.from_json, BackgroundListHeader.from_json, *(kind.from_json for kind in EXEC_REQUESTS.values())]
FIELDS = ["action", "path", "recursive", "mode", "exec_id", "signal", "grace_ms", "timeout_ms", "from_id", "follow"]


class UntrustedTests(SynchronousTestCase):
    """Whatever the peer sends, a reader returns a record or raises ``BadHeader``."""

    @given(json_values)
    def test_any_json(self, value: Any) -> None:
        """Any JSON value: a record or BadHeader."""
        read_all(READERS, value)

    @given(headers, st.sampled_from(FIELDS), json_values | any_texts,
           st.sampled_from([{}, {"exec_id": "ex_1"}, *({"action": action, "path": "/"} for action in ACTIONS)]))
    def test_any_field(self, header: dict[str, Any], name: str, value: Any, base: dict[str, Any]) -> None:
        """An object with any value in a known field (and others besides): a record or BadHeader."""
        read_all(READERS, {**header, **base, name: value})


class FsHeaderTests(SynchronousTestCase):
    """:class:`FsHeader`: one file-system request."""

    @given(fs_headers)
    def test_round_trip(self, header: FsHeader) -> None:
        """Every record comes back unchanged from its JSON, which names its op."""
        sent = through_json(header.to_json())
        self.assertEqual(sent["op"], "fs")
        self.assertEqual(FsHeader.from_json(sent), header)

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


class BackgroundRequestTests(SynchronousTestCase):
    """The requests about background execs but ``start``."""

    @given(background_requests)
    def test_round_trip(self, header: Any) -> None:
        """Every record comes back unchanged from its JSON, which names its op and action."""
        sent = through_json(header.to_json())
        self.assertEqual((sent["op"], sent["action"]), ("background", header.action))
        self.assertEqual(type(header).from_json(sent), header)

    def test_json(self) -> None:
        """The headers the host always sent: op, action, exec_id, then the action's fields."""
        self.assertEqual(BackgroundListHeader().to_json(), {"op": "background", "action": "list"})
        self.assertEqual(BackgroundInfoHeader("ex_1").to_json(), {"op": "background", "action": "info", "exec_id": "ex_1"})
        self.assertEqual(BackgroundDeleteHeader("ex_1").to_json(),
                         {"op": "background", "action": "delete", "exec_id": "ex_1"})
        self.assertEqual(list(BackgroundKillHeader("ex_1", "INT", 7).to_json().items()), [
            ("op", "background"), ("action", "kill"), ("exec_id", "ex_1"), ("signal", "INT"), ("grace_ms", 7)])
        self.assertEqual(BackgroundWaitHeader("ex_1", 5).to_json(),
                         {"op": "background", "action": "wait", "exec_id": "ex_1", "timeout_ms": 5})
        self.assertEqual(BackgroundLogsHeader("ex_1", 3, True).to_json(),
                         {"op": "background", "action": "logs", "exec_id": "ex_1", "from_id": 3, "follow": True})

    def test_messages(self) -> None:
        """Each wrong field is named; the first wrong one wins."""
        signals = ", ".join(SIGNAL_NAMES)
        for kind, header, message in [
            (BackgroundInfoHeader, {"exec_id": 1}, "exec_id must be a string"),
            (BackgroundKillHeader, {"signal": "X"}, "exec_id must be a string"),
            (BackgroundKillHeader, {"exec_id": "e", "signal": "STOP", "grace_ms": -1}, f"signal must be one of {signals}"),
            (BackgroundKillHeader, {"exec_id": "e", "signal": ["TERM"]}, f"signal must be one of {signals}"),
            (BackgroundKillHeader, {"exec_id": "e", "grace_ms": 1.0}, "grace_ms must be an integer 0 .. 3600000"),
            (BackgroundWaitHeader, {"exec_id": "e", "timeout_ms": False}, "timeout_ms must be an integer 0 .. 86400000"),
            (BackgroundWaitHeader, {"exec_id": "e", "timeout_ms": 86400001}, "timeout_ms must be an integer 0 .. 86400000"),
            (BackgroundLogsHeader, {"exec_id": "e", "from_id": 2**63, "follow": 0},
             "from_id must be an integer 0 .. 9223372036854775807"),
            (BackgroundLogsHeader, {"exec_id": "e", "follow": None}, "follow must be a boolean"),
        ]:
            self.assertEqual(refusal(kind.from_json, header), message)

    def test_defaults(self) -> None:
        """Absent fields take the defaults: TERM after 5 s, a wait of 30 s, the log from its oldest frame."""
        self.assertEqual(BackgroundKillHeader.from_json({"exec_id": "e"}), BackgroundKillHeader("e", "TERM", 5000))
        self.assertEqual(BackgroundWaitHeader.from_json({"exec_id": "e"}), BackgroundWaitHeader("e", 30_000))
        self.assertEqual(BackgroundLogsHeader.from_json({"exec_id": "e"}), BackgroundLogsHeader("e", 0, False))
        self.assertEqual(BackgroundListHeader.from_json({"exec_id": 3}), BackgroundListHeader())
