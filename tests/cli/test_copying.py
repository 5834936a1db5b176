# -*- test-case-name: tests.cli.test_copying -*-
"""
Tests for :mod:`vmservice.cli.copying`: ``HOST:PATH`` parsing, tar packing
and extraction through real pipes (modes kept, escapes refused) and the
progress line.  Whole ``vmctl cp`` runs against a loopback server are tested
in :mod:`tests.integration.cli.test_copying`.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import threading
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.cli.trees import make_tree
from vmservice.cli.copying import (
    CopyFailed,
    Location,
    copy_contents,
    directory_destination,
    file_destination,
    parse_location,
)
from vmservice.cli.progress import Progress
from vmservice.cli.tar_streams import pack_directory, unpack_into, unpacked_size
from vmservice.wire.excludes import Excludes


class LocationTests(SynchronousTestCase):
    def test_examples(self) -> None:
        """HOST:PATH is remote; paths starting with / . ~ or with a / before the colon are local."""
        self.assertEqual(parse_location("demo-1:/srv/x"), Location("demo-1", "/srv/x"))
        self.assertEqual(parse_location("demo-1:"), Location("demo-1", ""))
        for local in ("./a:b", "/x:y", "~/a:b", "dir/a:b", ":x", "plain", "../up"):
            self.assertEqual(parse_location(local), Location(None, local))

    @given(st.from_regex(r"\A[a-z][a-z0-9-]{0,20}\Z"), st.text(max_size=30))
    def test_remote_round_trip(self, host: str, path: str) -> None:
        """Any hostname followed by a colon gives back exactly that host and the rest as the path."""
        self.assertEqual(parse_location(f"{host}:{path}"), Location(host, path))


class PlacementTests(SynchronousTestCase):
    """The cp-v1 rules for downloads, on local directories."""

    def setUp(self) -> None:
        self.root = self.mktemp()
        os.makedirs(os.path.join(self.root, "dir", "sub"))
        with open(os.path.join(self.root, "file"), "wb"):
            pass

    def test_copy_contents(self) -> None:
        """dir/., . and / name contents; dir, dir/ and other paths name the directory."""
        for path in ("dir/.", "dir/./", "/srv/x/.", ".", "./", "/", "//"):
            self.assertTrue(copy_contents(path), path)
        for path in ("dir", "dir/", "/srv/x", "./dir", "..", "a.b", "x/.."):
            self.assertFalse(copy_contents(path), path)

    def test_file(self) -> None:
        """File: existing directory -> dir/name; existing file -> itself; missing -> itself; missing with / -> error."""
        d, f = os.path.join(self.root, "dir"), os.path.join(self.root, "file")
        self.assertEqual(file_destination(d, "n"), os.path.join(d, "n"))
        self.assertEqual(file_destination(d + "/", "n"), os.path.join(d, "n"))
        self.assertEqual(file_destination(f, "n"), f)
        self.assertEqual(file_destination(os.path.join(self.root, "new"), "n"), os.path.join(self.root, "new"))
        self.assertRaises(CopyFailed, file_destination, os.path.join(self.root, "new") + "/", "n")

    def test_directory(self) -> None:
        """Directory: non-directory -> error; contents -> merge; existing -> dest/name (merged if there); missing -> create."""
        d, f = os.path.join(self.root, "dir"), os.path.join(self.root, "file")
        self.assertRaises(CopyFailed, directory_destination, f, "x", False)
        self.assertEqual(directory_destination(d, "x", True), (d, True))
        self.assertEqual(directory_destination(d, "x", False), (os.path.join(d, "x"), False))
        self.assertEqual(directory_destination(d, "sub", False), (os.path.join(d, "sub"), True))
        new = os.path.join(self.root, "new")
        self.assertEqual(directory_destination(new, "x", False), (new, False))
        self.assertRaises(CopyFailed, directory_destination, d, None, False)
        with open(os.path.join(d, "taken"), "wb"):
            pass
        self.assertRaises(CopyFailed, directory_destination, d, "taken", False)


class TarTests(SynchronousTestCase):
    """pack_directory and unpack_into, each in a thread on one end of a real pipe."""

    def tree(self) -> str:
        return make_tree(self.mktemp())

    def through_pipe(self, writer: Any, reader: Any) -> None:
        read_end, write_end = os.pipe()
        errors: list[BaseException] = []

        def guarded(function: Any, *args: Any) -> None:
            try:
                function(*args)
            except BaseException as error:
                errors.append(error)

        thread = threading.Thread(target=guarded, args=(writer, write_end))
        thread.start()
        guarded(reader, read_end)
        thread.join()
        if errors:
            raise errors[0]

    def test_round_trip_keeps_contents_and_modes(self) -> None:
        """A directory packed and unpacked elsewhere has the same files, bytes and permission bits."""
        source = self.tree()
        target = self.mktemp()
        os.makedirs(target)
        self.through_pipe(lambda fd: pack_directory(source, fd), lambda fd: unpack_into(fd, target))
        for relative in ("a.sh", "sub", "sub/data", "sub/deep"):
            before, after = os.stat(os.path.join(source, relative)), os.stat(os.path.join(target, relative))
            self.assertEqual(stat.S_IMODE(after.st_mode), stat.S_IMODE(before.st_mode), relative)
        with open(os.path.join(source, "sub", "data"), "rb") as a, open(os.path.join(target, "sub", "data"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertFalse(os.path.exists(os.path.join(target, os.path.basename(source))))

    def test_pack_has_no_top_directory(self) -> None:
        """Entries are relative to the source directory."""
        source = self.tree()
        buffer = io.BytesIO()
        self.through_pipe(lambda fd: pack_directory(source, fd), lambda fd: buffer.write(os.fdopen(fd, "rb").read()))
        buffer.seek(0)
        with tarfile.open(fileobj=buffer) as tar:
            self.assertEqual(sorted(tar.getnames()), ["a.sh", "sub", "sub/data", "sub/deep"])

    def test_escapes_refused(self) -> None:
        """Names climbing out with .. and links pointing out are refused; nothing lands outside the target."""
        outside = self.mktemp()
        os.makedirs(outside)
        for name, kind in (("../escaped", tarfile.REGTYPE), ("a/../../escaped", tarfile.REGTYPE), ("link", tarfile.SYMTYPE)):
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                info = tarfile.TarInfo(name)
                info.type = kind
                if kind == tarfile.SYMTYPE:
                    info.linkname = "/etc/passwd"
                    tar.addfile(info)
                else:
                    info.size = 1
                    tar.addfile(info, io.BytesIO(b"x"))
            target = os.path.join(outside, "t-" + str(len(os.listdir(outside))))
            os.makedirs(target)

            def feed(fd: int, data: bytes = buffer.getvalue()) -> None:
                with os.fdopen(fd, "wb") as f:
                    try:
                        f.write(data)
                    except BrokenPipeError:
                        pass

            with self.assertRaises(tarfile.TarError):
                self.through_pipe(feed, lambda fd, target=target: unpack_into(fd, target))
            self.assertEqual(os.listdir(target), [], name)
        self.assertFalse(os.path.exists(os.path.join(outside, "escaped")))

    def test_absolute_names_stay_inside(self) -> None:
        """An absolute name is extracted under the target, its leading slash dropped."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo("/abs-file")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
        target = self.mktemp()
        os.makedirs(target)

        def feed(fd: int) -> None:
            with os.fdopen(fd, "wb") as f:
                f.write(buffer.getvalue())

        self.through_pipe(feed, lambda fd: unpack_into(fd, target))
        self.assertEqual(os.listdir(target), ["abs-file"])


class ProgressTests(SynchronousTestCase):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    def test_terminal(self) -> None:
        """On a terminal the line is redrawn at most every interval and ends with a newline."""
        clock, err = Clock(), self.Terminal()
        progress = Progress(clock, err, 2048)
        progress.add(1024)
        progress.add(512)
        clock.advance(1)
        progress.add(512)
        progress.finish()
        lines = err.getvalue().split("\r")[1:]
        self.assertEqual(len(lines), 3)
        self.assertTrue(lines[1].startswith("2K / 2K  100%  2K/s"), lines[1])
        self.assertTrue(err.getvalue().endswith("\n"))

    def test_not_terminal(self) -> None:
        """Nothing is drawn when stderr is not a terminal."""
        err = io.StringIO()
        progress = Progress(Clock(), err, None)
        progress.add(10)
        progress.finish()
        self.assertEqual((err.getvalue(), progress.done), ("", 10))


class ExcludeTests(SynchronousTestCase):
    """What vmctl leaves out of the tar it packs, and the unpacked size it announces."""

    def test_pack_and_size(self) -> None:
        """Excluded files and directories (with their contents) are not packed nor counted."""
        root = make_tree(self.mktemp())
        with open(os.path.join(root, "x.log"), "wb") as f:
            f.write(b"12345")
        os.symlink("a.sh", os.path.join(root, "link"))
        everything = unpacked_size(root)
        self.assertEqual(everything, len(b"#!/bin/sh\n") + 300_000 + 5)
        excludes = Excludes(["*.log", "sub"])
        self.assertEqual(unpacked_size(root, excludes), len(b"#!/bin/sh\n"))
        read_end, write_end = os.pipe()
        thread = threading.Thread(target=pack_directory, args=(root, write_end, excludes))
        thread.start()
        with os.fdopen(read_end, "rb") as stream:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                names = [member.name for member in tar]
        thread.join()
        self.assertEqual(names, ["a.sh", "link"])
