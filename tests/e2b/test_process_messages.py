"""
Tests for :mod:`vmservice.e2b.process_messages`: the process service's
requests read and bounded, its events written as envd writes them.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.trial.unittest import SynchronousTestCase

from vmservice.e2b.connect import Code, ConnectError
from vmservice.e2b.process_messages import (MAX_INPUT, MAX_SIZE, MAX_TEXT, MAX_WORDS, ProcessConfig, Selector,
                                            StartSpec, data_event, end_event, keepalive_event, process_input,
                                            pty_size, selector, signal_name, start_event, start_spec)


class RequestTests(SynchronousTestCase):
    """Requests are read with envd's defaults; anything else is ``invalid_argument``."""

    def invalid(self, read: Callable[[Any], object], value: Any) -> None:
        with self.assertRaises(ConnectError) as caught:
            read(value)
        self.assertEqual(caught.exception.code, Code.INVALID_ARGUMENT, value)

    def test_start(self) -> None:
        """A start request's command, terminal, tag and stdin (a pipe unless it says false)."""
        self.assertEqual(start_spec({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo"], "envs": {"A": "1"},
                                                 "cwd": "/tmp"}, "tag": "t", "stdin": False,
                                     "pty": {"size": {"cols": 100, "rows": "30"}}}),
                         StartSpec(ProcessConfig("/bin/bash", ("-l", "-c", "echo"), (("A", "1"),), "/tmp"),
                                   (100, 30), "t", False))
        self.assertEqual(start_spec({"process": {"cmd": "ls"}}), StartSpec(ProcessConfig("ls")))

    def test_start_refused(self) -> None:
        """A missing or empty command, wrong types, NUL, '=' in a name, too many or too long words."""
        for message in ({}, {"process": {"cmd": ""}}, {"process": {"cmd": 1}}, {"process": "ls"},
                        {"process": {"cmd": "ls", "args": "x"}}, {"process": {"cmd": "ls", "args": [1]}},
                        {"process": {"cmd": "l\0s"}}, {"process": {"cmd": "ls", "envs": {"A=B": "1"}}},
                        {"process": {"cmd": "ls", "envs": {"": "1"}}}, {"process": {"cmd": "ls", "envs": []}},
                        {"process": {"cmd": "ls", "envs": {"A": 1}}},
                        {"process": {"cmd": "ls", "args": ["a"] * (MAX_WORDS + 1)}},
                        {"process": {"cmd": "x" * (MAX_TEXT + 1)}}, {"process": {"cmd": "ls", "cwd": 3}},
                        {"process": {"cmd": "ls"}, "stdin": "yes"}, {"process": {"cmd": "ls"}, "tag": 1},
                        {"process": {"cmd": "ls"}, "pty": {"size": {"cols": -1}}}):
            self.invalid(start_spec, message)

    def test_config_shown(self) -> None:
        """``List`` shows the command as it was asked for; the cwd only when given."""
        self.assertEqual(ProcessConfig("ls", ("-l",), (("A", "1"),)).to_json(),
                         {"cmd": "ls", "args": ["-l"], "envs": {"A": "1"}})
        self.assertEqual(ProcessConfig("ls", cwd="/").to_json()["cwd"], "/")

    def test_selector(self) -> None:
        """A pid (a number or its digits) or a tag; neither is refused."""
        self.assertEqual(selector({"process": {"pid": 12}}), Selector(pid=12))
        self.assertEqual(selector({"process": {"pid": "12"}}), Selector(pid=12))
        self.assertEqual(selector({"process": {"tag": "web"}}), Selector(tag="web"))
        for message in ({}, {"process": {}}, {"process": {"pid": -1}}, {"process": {"pid": 2**32}},
                        {"process": {"pid": True}}, {"process": {"tag": None}}):
            self.invalid(selector, message)

    def test_signal(self) -> None:
        """SIGTERM and SIGKILL by name or number; nothing else."""
        self.assertEqual(signal_name({"signal": "SIGNAL_SIGKILL"}), "SIGKILL")
        self.assertEqual(signal_name({"signal": 15}), "SIGTERM")
        for message in ({}, {"signal": "SIGNAL_UNSPECIFIED"}, {"signal": 2}, {"signal": []}):
            self.invalid(signal_name, message)

    def test_size(self) -> None:
        """Columns and rows 0 .. 65535."""
        self.assertEqual(pty_size({"size": {"cols": MAX_SIZE, "rows": 1}}), (MAX_SIZE, 1))
        self.invalid(pty_size, {"size": {"cols": MAX_SIZE + 1, "rows": 1}})
        self.invalid(pty_size, {"size": 3})

    def test_input(self) -> None:
        """Base64 (standard or URL-safe, padded or not) to the stdin or the terminal; bounded."""
        self.assertEqual(process_input({"stdin": "aGk="}), ("stdin", b"hi"))
        self.assertEqual(process_input({"pty": "-_8"}), ("pty", b"\xfb\xff"))
        for value in ({}, {"stdin": "!!"}, {"pty": 3}, {"stdin": "A" * (MAX_INPUT * 2)}, None):
            self.invalid(process_input, value)


class EventTests(SynchronousTestCase):
    """Events in protobuf's JSON, defaults omitted, as envd words them."""

    def test_simple(self) -> None:
        """Start, data and keepalive events."""
        self.assertEqual(start_event(7), {"event": {"start": {"pid": 7}}})
        self.assertEqual(data_event("stderr", b"hi"), {"event": {"data": {"stderr": "aGk="}}})
        self.assertEqual(keepalive_event(), {"event": {"keepalive": {}}})

    def test_end(self) -> None:
        """An exit with 0 has no code and no error; another exit both; a signal -1 and Go's words."""
        self.assertEqual(end_event(0, None), {"event": {"end": {"exited": True, "status": "exit status 0"}}})
        self.assertEqual(end_event(3, None), {"event": {"end": {"exitCode": 3, "exited": True,
                                                                "status": "exit status 3",
                                                                "error": "exit status 3"}}})
        self.assertEqual(end_event(137, "SIGKILL"), {"event": {"end": {"exitCode": -1, "status": "signal: killed",
                                                                       "error": "signal: killed"}}})
        self.assertEqual(end_event(0, "SIGRTMIN")["event"]["end"]["status"], "signal: SIGRTMIN")
        self.assertEqual(end_event(127, None, "no such file")["event"]["end"]["error"], "no such file")
