# -*- test-case-name: tests.wire.test_openheaders -*-
"""
Tests for :mod:`vmservice.wire.openheaders`: every record comes back from its
own JSON, and no JSON value makes a reader raise anything but ``BadHeader``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Union

from hypothesis import given, strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.wire.headerchecks import any_texts, ids, read_all, refusal, texts, through_json
from tests.wire.strategies import headers, json_values
from vmservice.wire.openheaders.copy import DownloadHeader, UploadHeader
from vmservice.wire.openheaders.exec import MAX_RING_BYTES, BackgroundStartHeader, ExecHeader
from vmservice.wire.openheaders.fields import BadHeader
from vmservice.wire.openheaders.shell import ShellHeader
from vmservice.wire.openheaders.tunnel import ForwardHeader
from vmservice.wire.openheaders.watch import MAX_DEBOUNCE, WATCH_EVENT_TYPES, WatchHeader
from vmservice.wire.upstream import MAX_UNIX_SOCKET_PATH, Upstream

exec_headers = st.builds(
    ExecHeader,
    cmd=st.text(min_size=1, max_size=20),
    args=st.lists(texts, max_size=4).map(tuple),
    env=st.lists(texts, max_size=4).map(tuple),
    uid=ids,
    gid=ids,
    cwd=texts,
    shell=texts,
    umask=st.none() | st.integers(min_value=0, max_value=0o777),
    stdin=st.booleans(),
    stdout=st.booleans(),
    stderr=st.booleans(),
)
background_starts = st.builds(
    BackgroundStartHeader,
    exec=exec_headers.map(lambda h: replace(h, stdin=False, stdout=True, stderr=True)),
    ring_bytes=st.integers(min_value=1, max_value=MAX_RING_BYTES),
)
shell_headers = st.builds(ShellHeader, uid=ids, gid=ids, shell=texts, cwd=texts, cols=ids, rows=ids,
                          env=st.lists(texts, max_size=4).map(tuple))
forward_headers = st.builds(
    ForwardHeader,
    st.builds(Upstream, unix=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
              .map(lambda p: "/" + p).filter(lambda p: len(p.encode()) <= MAX_UNIX_SOCKET_PATH))
    | st.builds(Upstream, host=st.text(st.characters(blacklist_characters="\x00"), min_size=1, max_size=30),
                port=st.integers(min_value=1, max_value=65535)),
)
watch_headers = st.builds(
    WatchHeader,
    paths=st.lists(texts, min_size=1, max_size=3).map(tuple),
    patterns=st.lists(texts, max_size=3).map(tuple),
    events=st.lists(st.sampled_from(WATCH_EVENT_TYPES), max_size=5).map(tuple),
    recursive=st.booleans(),
    debounce=st.floats(min_value=0, max_value=MAX_DEBOUNCE),
    uid=ids,
)
copy_paths = st.just("~") | st.sampled_from(["/", "~/"]).flatmap(lambda head: texts.map(lambda tail: head + tail)).filter(
    lambda path: "\x00" not in path)
optional_ids = st.none() | st.integers(min_value=0, max_value=2**32 - 2)
base_names = st.none() | texts.filter(lambda name: name not in ("", ".", "..") and not set(name) & {"/", "\x00"})
upload_headers = st.builds(
    UploadHeader,
    path=copy_paths,
    mode=st.sampled_from(["binary", "tar"]),
    uid=optional_ids,
    gid=optional_ids,
    permissions=st.none() | st.integers(min_value=0, max_value=0o7777),
    exclude=st.lists(texts, max_size=3).map(tuple),
    unpacked_size=st.none() | st.integers(min_value=0, max_value=2**63),
) | st.builds(
    UploadHeader, path=copy_paths, semantics=st.just("cp-v1"), source_name=base_names, copy_contents=st.booleans(),
)
download_headers = st.builds(
    DownloadHeader,
    path=copy_paths,
    mode=st.sampled_from(["binary", "tar", "recursive"]),
    semantics=st.sampled_from(["legacy", "cp-v1"]),
    exclude=st.lists(texts, max_size=3).map(tuple),
    uid=optional_ids,
)

Header = Union[ExecHeader, BackgroundStartHeader, ShellHeader, ForwardHeader, WatchHeader, UploadHeader,
               DownloadHeader]
#: The op each record's JSON names.
OPS = {ExecHeader: "exec", BackgroundStartHeader: "background", ShellHeader: "shell", ForwardHeader: "forward",
       WatchHeader: "watch", UploadHeader: "cp-upload", DownloadHeader: "cp-download"}

#: Every reader of untrusted JSON.
READERS: list[Callable[[object], object]] = [
    ExecHeader.from_json, BackgroundStartHeader.from_json, ShellHeader.from_json, ForwardHeader.from_json,
    WatchHeader.from_json, UploadHeader.from_json, DownloadHeader.from_json,
]
#: Every field a reader looks at.
FIELDS = ["cmd", "args", "env", "uid", "gid", "cwd", "shell", "umask", "stdin", "stdout", "stderr", "ring_bytes",
          "cols", "rows", "unix", "host", "port", "paths", "patterns", "events", "recursive", "debounce",
          "path", "mode", "permissions", "semantics", "source_name", "copy_contents", "exclude", "unpacked_size"]


class RoundTripTests(SynchronousTestCase):
    """``from_json(to_json(record)) == record``, through real JSON."""

    @given(exec_headers | background_starts | shell_headers | forward_headers | watch_headers | upload_headers
           | download_headers)
    def test_round_trip(self, header: Header) -> None:
        """Every record comes back unchanged from its JSON, which names its op."""
        sent = through_json(header.to_json())
        self.assertEqual(sent["op"], OPS[type(header)])
        self.assertEqual(type(header).from_json(sent), header)


class UntrustedTests(SynchronousTestCase):
    """Whatever the peer sends, a reader returns a record or raises ``BadHeader``."""

    @given(json_values)
    def test_any_json(self, value: Any) -> None:
        """Any JSON value: a record or BadHeader."""
        read_all(READERS, value)

    @given(headers, st.sampled_from(FIELDS), json_values | any_texts, st.sampled_from([{}, {"cmd": "x"}, {"host": "h"}, {"paths": ["/"]},
                                                                                {"path": "/", "semantics": "cp-v1"}]))
    def test_any_field(self, header: dict[str, Any], name: str, value: Any, base: dict[str, Any]) -> None:
        """An object with any value in a known field (and others besides): a record or BadHeader."""
        read_all(READERS, {**header, **base, name: value})

    def test_not_an_object(self) -> None:
        """A header that is not an object is refused as such."""
        for read in READERS:
            with self.assertRaises(BadHeader) as caught:
                read(["cmd"])
            self.assertEqual(str(caught.exception), "the header must be a JSON object")


class ExecMessageTests(SynchronousTestCase):
    """The refusals name the field, in the words the guest has always sent."""

    def assertRefused(self, header: dict[str, Any], message: str) -> None:
        """``header`` is refused with ``message``."""
        self.assertEqual(refusal(ExecHeader.from_json, header), message)

    def test_messages(self) -> None:
        """Each wrong field gives its own message; the first wrong one wins."""
        self.assertRefused({}, "field 'cmd' must be a non-empty string")
        self.assertRefused({"cmd": ""}, "field 'cmd' must be a non-empty string")
        self.assertRefused({"cmd": "x", "args": "a"}, "field 'args' must be a list of strings")
        self.assertRefused({"cmd": "x", "env": [1]}, "field 'env' must be a list of strings")
        self.assertRefused({"cmd": "x", "umask": 0o1000}, "field 'umask' must be null or 0..0o777")
        self.assertRefused({"cmd": "x", "umask": True}, "field 'umask' must be null or 0..0o777")
        self.assertRefused({"cmd": "x", "uid": True}, "field 'uid' must be int")
        self.assertRefused({"cmd": "x", "gid": 2**32}, "uid and gid must be 0 .. 2^32-1")
        self.assertRefused({"cmd": "x", "cwd": 1, "stdin": 1}, "field 'cwd' must be str")
        self.assertRefused({"cmd": "x", "stdin": "yes"}, "field 'stdin' must be bool")

    def test_defaults(self) -> None:
        """Absent fields take the defaults of the record."""
        self.assertEqual(ExecHeader.from_json({"cmd": "x", "op": "exec"}), ExecHeader(cmd="x"))


class BackgroundStartTests(SynchronousTestCase):
    """The start of a background exec."""

    def test_outputs_forced(self) -> None:
        """stdin, stdout and stderr are read as /dev/null, kept and kept, whatever they say."""
        start = BackgroundStartHeader.from_json({"cmd": "x", "stdin": "junk", "stdout": False, "stderr": 3})
        self.assertEqual(start, BackgroundStartHeader(ExecHeader(cmd="x", stdin=False, stdout=True, stderr=True)))

    def test_ring_bytes(self) -> None:
        """ring_bytes is 1 .. MAX_RING_BYTES, an exact int; the exec fields are checked first."""
        for bad in (0, MAX_RING_BYTES + 1, True, 1.0, "1"):
            with self.assertRaises(BadHeader) as caught:
                BackgroundStartHeader.from_json({"cmd": "x", "ring_bytes": bad})
            self.assertEqual(str(caught.exception), f"ring_bytes must be 1 .. {MAX_RING_BYTES}")
        with self.assertRaises(BadHeader) as caught:
            BackgroundStartHeader.from_json({"ring_bytes": 0})
        self.assertEqual(str(caught.exception), "field 'cmd' must be a non-empty string")

    def test_json(self) -> None:
        """The exec's fields sit beside op, action and ring_bytes."""
        self.assertEqual(BackgroundStartHeader(ExecHeader(cmd="x"), 5).to_json(), {
            "op": "background", "action": "start", "ring_bytes": 5, "cmd": "x", "args": [], "env": [], "uid": 0,
            "gid": 0, "cwd": "", "shell": "/bin/bash", "umask": None, "stdin": False, "stdout": True, "stderr": True,
        })


class ShellMessageTests(SynchronousTestCase):
    """The refusals of a shell header, in the words the guest has always sent."""

    def test_messages(self) -> None:
        """Numbers are 0 .. 2^32-1 (not bools), shell and cwd strings; defaults fill the rest."""
        for name in ("uid", "gid", "cols", "rows"):
            for bad in (-1, 2**32, True, 1.5, "1"):
                with self.assertRaises(BadHeader) as caught:
                    ShellHeader.from_json({name: bad})
                self.assertEqual(str(caught.exception), f"field {name!r} must be an integer 0 .. 4294967295")
        for header in ({"shell": 1}, {"cwd": None}):
            with self.assertRaises(BadHeader) as caught:
                ShellHeader.from_json(header)
            self.assertEqual(str(caught.exception), "fields 'shell' and 'cwd' must be strings")
        self.assertEqual(ShellHeader.from_json({"op": "shell"}), ShellHeader())


class ForwardMessageTests(SynchronousTestCase):
    """The refusals of a tunnel's header, in the words the guest has always sent."""

    def assertRefused(self, header: dict[str, Any], message: str) -> None:
        """``header`` is refused with ``message``."""
        self.assertEqual(refusal(ForwardHeader.from_json, header), message)

    def test_messages(self) -> None:
        """unix wins when present; else host and port; long values are cut at 200 characters."""
        self.assertRefused({"unix": "x", "host": "h", "port": 1}, "unix must be an absolute path, not 'x'")
        self.assertRefused({"unix": "/" + "x" * MAX_UNIX_SOCKET_PATH}, "the UNIX socket path is too long")
        self.assertRefused({}, "host must be a non-empty string, not None")
        self.assertRefused({"host": "h", "port": 0}, "port must be an integer from 1 to 65535, not 0")
        self.assertRefused({"host": "h", "port": True}, "port must be an integer from 1 to 65535, not True")
        self.assertRefused({"unix": "/\ud800"}, "unix must be an absolute path, not '/\\ud800'")
        with self.assertRaises(BadHeader) as caught:
            ForwardHeader.from_json({"unix": "x" * 500})
        self.assertEqual(str(caught.exception), f"unix must be an absolute path, not {'x' * 500!r}"[:200])

    def test_json(self) -> None:
        """A UNIX socket is sent as unix alone, a TCP upstream as host and port."""
        self.assertEqual(ForwardHeader(Upstream(unix="/s")).to_json(), {"op": "forward", "unix": "/s"})
        self.assertEqual(ForwardHeader(Upstream(host="h", port=80)).to_json(),
                         {"op": "forward", "host": "h", "port": 80})


class WatchMessageTests(SynchronousTestCase):
    """The refusals of a watch's header, in the words the guest has always sent."""

    def test_messages(self) -> None:
        """Each wrong field is named; the first wrong one wins."""
        use = ", ".join(WATCH_EVENT_TYPES)
        for header, message in [
            ({}, "paths must name at least one path"),
            ({"paths": "/x"}, "paths must be a list of strings"),
            ({"paths": ["/"], "events": ["open", "create"]}, f"unknown event types ['open']: use {use}"),
            ({"paths": ["/"], "recursive": "yes"}, "recursive must be true or false"),
            ({"paths": ["/"], "debounce": True}, "debounce must be 0 to 3600 seconds"),
            ({"paths": ["/"], "debounce": 7200}, "debounce must be 0 to 3600 seconds"),
            ({"paths": ["/"], "uid": 2**32}, "uid must be 0 .. 2^32-1"),
            ({"paths": ["/"], "patterns": [3]}, "patterns must be a list of strings"),
        ]:
            self.assertEqual(refusal(WatchHeader.from_json, header), message)

    def test_defaults(self) -> None:
        """Only paths are needed; an integer debounce is read as seconds."""
        self.assertEqual(WatchHeader.from_json({"paths": ["/"], "debounce": 2}), WatchHeader(("/",), debounce=2.0))


class CopyMessageTests(SynchronousTestCase):
    """The refusals of a copy's header, in the words the guest has always sent."""

    def test_upload(self) -> None:
        """Each wrong field is named, in the order the guest always checked them."""
        for header, message in [
            ({"mode": "zip", "semantics": "x"}, "invalid mode: zip (binary, tar)"),
            ({"semantics": "cp-v2"}, "invalid copy semantics: cp-v2 (legacy, cp-v1)"),
            ({"uid": True}, "uid must be null or 0 .. 4294967294"),
            ({"gid": 2**32 - 1}, "gid must be null or 0 .. 4294967294"),
            ({}, "path is required"),
            ({"path": "/a\x00"}, "path must not contain NUL"),
            ({"path": "~x", "permissions": -1}, "path must be absolute: '~x'"),
            ({"path": "/", "permissions": 0o10000}, "permissions must be null or 0 .. 0o7777"),
            ({"path": "/", "exclude": "*.o"}, "exclude must be a list of patterns"),
            ({"path": "/", "unpacked_size": -1}, "unpacked_size must be null or a byte count"),
            ({"path": "/", "semantics": "cp-v1", "source_name": ".."},
             "source_name must be a base name (no '/', not . or ..), not '..'"),
        ]:
            self.assertEqual(refusal(UploadHeader.from_json, header), message)

    def test_upload_lenient(self) -> None:
        """Falsy semantics and excludes are the defaults; legacy copies ignore the cp-v1 fields."""
        self.assertEqual(UploadHeader.from_json({"path": "/x", "semantics": "", "exclude": 0, "source_name": "..",
                                                 "copy_contents": True}), UploadHeader("/x"))
        self.assertEqual(UploadHeader.from_json({"path": "/x", "semantics": "cp-v1", "source_name": "",
                                                 "copy_contents": 1}), UploadHeader("/x", semantics="cp-v1"))

    def test_download(self) -> None:
        """A download's mode may be recursive; its uid is checked before its path."""
        self.assertEqual(refusal(DownloadHeader.from_json, {"mode": "zip"}), "invalid mode: zip (binary, tar, recursive)")
        self.assertEqual(refusal(DownloadHeader.from_json, {"uid": -1}), "uid must be null or 0 .. 4294967294")
        self.assertEqual(refusal(DownloadHeader.from_json, {"path": "/", "exclude": [1]}),
                         "exclude must be a list of patterns")
        self.assertEqual(DownloadHeader.from_json({"path": "~", "mode": "recursive"}), DownloadHeader("~", "recursive"))
