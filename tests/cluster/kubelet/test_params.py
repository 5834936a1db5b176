"""Tests for :mod:`vmservice.cluster.kubelet.params`: paths and queries read strictly."""

from __future__ import annotations

from datetime import datetime, timezone
from urllib.parse import urlencode

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.cluster.kubelet.params import (
    MAX_QUERY, ExecQuery, LogsQuery, Target, exec_query, logs_query, query_pairs, target,
)
from vmservice.errors import BadRequest


def logs(query: str) -> LogsQuery:
    return logs_query(query_pairs(query.encode()))


def execs(query: str) -> ExecQuery:
    return exec_query(query_pairs(query.encode()))


class TargetTests(SynchronousTestCase):
    def test_names(self) -> None:
        """Three segments: a namespace, a pod and a container as Kubernetes names them."""
        self.assertEqual(target(["default", "web-7d9.x", "vm"]), Target("default", "web-7d9.x", "vm"))

    def test_percent_decoded(self) -> None:
        """Segments are percent-decoded before they are checked."""
        self.assertEqual(target(["default", "w%65b", "vm"]).pod, "web")

    def test_hostile(self) -> None:
        """Names Kubernetes would not give are refused: traversal, upper case, too long, too few segments."""
        for segments in (["..", "a", "b"], ["default", "%2e%2e", "b"], ["Default", "a", "b"],
                         ["default", "a/b", "c"], ["default", "a", "b" * 64], ["default", "a"],
                         ["default", "a", "b", "c"], ["default", "a" * 254, "b"], ["default", "a%00", "b"],
                         ["default", "%ff", "b"]):
            self.assertRaises(BadRequest, target, segments)


class LogsQueryTests(SynchronousTestCase):
    def test_defaults(self) -> None:
        """No parameters: everything, once, without timestamps."""
        self.assertEqual(logs(""), LogsQuery())

    def test_all(self) -> None:
        """Every option kubectl logs sends is read."""
        self.assertEqual(logs("follow=true&timestamps=true&tailLines=10&limitBytes=500&sinceSeconds=60"),
                         LogsQuery(True, True, 10, 500, 60, None))

    def test_since_time(self) -> None:
        """sinceTime is an RFC 3339 time with its offset (Z too, nanoseconds cut to microseconds)."""
        when = logs("sinceTime=2026-01-02T03:04:05Z").since_time
        self.assertEqual(when, datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
        self.assertRaises(BadRequest, logs, "sinceTime=2026-01-02")
        self.assertRaises(BadRequest, logs, "sinceTime=2026-01-02T03:04:05")
        self.assertRaises(BadRequest, logs, "sinceTime=yesterday")

    def test_bad(self) -> None:
        """Negative, non-numeric, twice given, both since options, previous: 400."""
        for query in ("tailLines=-1", "tailLines=ten", "limitBytes=0", "sinceSeconds=0", "follow=maybe",
                      "tailLines=1&tailLines=2", "sinceSeconds=5&sinceTime=2026-01-02T03:04:05Z",
                      "previous=true", "tailLines=%EF%BC%91", "tailLines=1_0", "tailLines= 1"):
            self.assertRaises(BadRequest, logs, query)

    def test_unknown_ignored(self) -> None:
        """Parameters this API does not know are ignored, as the kubelet ignores them."""
        self.assertEqual(logs("insecureSkipTLSVerifyBackend=true&container=vm"), LogsQuery())

    @given(st.integers(min_value=0, max_value=2**53))
    def test_tail_lines(self, number: int) -> None:
        """Any non-negative tailLines is read back as given."""
        self.assertEqual(logs(f"tailLines={number}").tail_lines, number)

    @given(st.dictionaries(st.sampled_from(["follow", "timestamps", "tailLines", "limitBytes", "sinceSeconds",
                                            "sinceTime", "previous", "other"]),
                           st.text(max_size=30)))
    def test_anything(self, params: dict[str, str]) -> None:
        """Any query gives a LogsQuery or a BadRequest, nothing else."""
        try:
            logs(urlencode(params))
        except BadRequest:
            pass


class ExecQueryTests(SynchronousTestCase):
    def test_as_the_api_server_sends_it(self) -> None:
        """command repeated (argv in order), the streams named input, output and error, booleans as 1."""
        self.assertEqual(execs("command=sh&command=-c&command=echo+hi&input=1&output=1&error=1&tty=1"),
                         ExecQuery(("sh", "-c", "echo hi"), True, True, True, True))
        self.assertEqual(execs("command=true&output=1"), ExecQuery(("true",), False, True, False, False))

    def test_pod_exec_options_names(self) -> None:
        """The streams by PodExecOptions' names too."""
        self.assertEqual(execs("command=sh&command=-c&command=echo+hi&stdin=1&stdout=1&stderr=1&tty=0"),
                         ExecQuery(("sh", "-c", "echo hi"), True, True, True, False))

    def test_no_command(self) -> None:
        """No command, or an empty program: 400."""
        self.assertRaises(BadRequest, execs, "stdout=1")
        self.assertRaises(BadRequest, execs, "command=&stdout=1")

    def test_no_stream(self) -> None:
        """At least one of stdin, stdout and stderr."""
        self.assertRaises(BadRequest, execs, "command=true")

    def test_hostile_command(self) -> None:
        """A NUL in a word, too many words, too long a query: 400."""
        self.assertRaises(BadRequest, execs, "command=a%00b&stdout=1")
        self.assertRaises(BadRequest, execs, "&".join(["command=x"] * 200) + "&stdout=1")
        self.assertRaises(BadRequest, query_pairs, b"command=" + b"x" * MAX_QUERY)

    def test_not_utf8(self) -> None:
        """A query that is not UTF-8: 400."""
        self.assertRaises(BadRequest, query_pairs, b"command=%ff&stdout=1")

    @given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
                            min_size=1, max_size=20), min_size=1, max_size=10))
    def test_argv_round_trip(self, argv: list[str]) -> None:
        """Any argv the API server encodes is read back word for word."""
        query = urlencode([("command", word) for word in argv] + [("stdout", "1")])
        self.assertEqual(execs(query).command, tuple(argv))
