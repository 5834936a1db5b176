# -*- test-case-name: tests.test_auth -*-
"""Tests for :mod:`vmservice.auth`."""

from __future__ import annotations

import os
import signal
import stat
from typing import Callable

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from vmservice.auth import (
    MAX_FILE_BYTES,
    Token,
    TokenFileError,
    Tokens,
    TokenWatch,
    bearer_matches,
    digest_identity,
    load_or_create_token,
    parse_tokens,
    read_tokens,
    token_path,
)


class TokenTests(SynchronousTestCase):
    def test_created_once_with_tight_modes(self) -> None:
        """The token is made at first use (dir 0700, file 0600, ≥32 bytes of entropy) and reused."""
        state = self.mktemp()
        token = load_or_create_token(state)
        self.assertGreaterEqual(len(token), 43)
        self.assertEqual(load_or_create_token(state), token)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(token_path(state))).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(token_path(state)).st_mode), 0o600)
        self.assertNotEqual(load_or_create_token(self.mktemp()), token)

    def test_modes_tightened(self) -> None:
        """An existing token file with loose permissions is tightened to 0600."""
        state = self.mktemp()
        load_or_create_token(state)
        os.chmod(token_path(state), 0o644)
        load_or_create_token(state)
        self.assertEqual(stat.S_IMODE(os.stat(token_path(state)).st_mode), 0o600)

    def test_bearer(self) -> None:
        """Only 'Bearer <token>' (scheme case-insensitive) matches."""
        self.assertTrue(bearer_matches(b"Bearer abc", "abc"))
        self.assertTrue(bearer_matches(b"bearer abc", "abc"))
        for header in (None, b"", b"Bearer", b"Bearer ", b"Bearer abd", b"Basic abc", b"abc"):
            self.assertFalse(bearer_matches(header, "abc"), header)


class ParseTests(SynchronousTestCase):
    def test_lines(self) -> None:
        """Tokens one per line, with optional labels; blanks and comments skipped; unlabelled ones named by digest."""
        tokens = parse_tokens("# ops\n\nAAAAAAAAAAAAAAAA ci\n  BBBBBBBBBBBBBBBBBBBB  \n", "f")
        self.assertEqual([t.secret for t in tokens], [b"A" * 16, b"B" * 20])
        self.assertEqual(tokens[0].identity, "ci")
        self.assertEqual(tokens[1].identity, digest_identity(b"B" * 20))
        self.assertTrue(tokens[1].identity.startswith("sha256:"))
        self.assertNotIn("BBBB", tokens[1].identity)
        self.assertNotIn("BBBB", repr(tokens[1]))

    def test_refused(self) -> None:
        """Short tokens, extra words, bad labels, repeats, and a file with no token are refused, naming the line."""
        for text in ("short\n", "A" * 16 + " a b\n", "A" * 16 + " bad/label\n", ("A" * 16 + "\n") * 2,
                     "A" * 16 + " x\n" + "B" * 16 + " x\n", "# only a comment\n", ""):
            self.assertRaises(TokenFileError, parse_tokens, text, "f")
        with self.assertRaises(TokenFileError) as caught:
            parse_tokens("A" * 16 + "\nshort\n", "tokens.txt")
        self.assertIn("tokens.txt:2", str(caught.exception))


class ReadTests(SynchronousTestCase):
    def _file(self, text: str, mode: int = 0o600) -> str:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def test_reads(self) -> None:
        """A private file owned by the daemon's user is read."""
        self.assertEqual(len(read_tokens(self._file("A" * 16 + "\n" + "B" * 16 + "\n"))), 2)

    def test_unsafe_refused(self) -> None:
        """A file others may write, a file of another user, a directory and a missing file are refused."""
        self.assertRaises(TokenFileError, read_tokens, self._file("A" * 16, 0o622))
        foreign = self._file("A" * 16)
        os.chown(foreign, 65534, 65534)
        self.assertRaises(TokenFileError, read_tokens, foreign)
        directory = self.mktemp()
        os.mkdir(directory)
        self.assertRaises(TokenFileError, read_tokens, directory)
        self.assertRaises(TokenFileError, read_tokens, self.mktemp())

    def test_too_large(self) -> None:
        """A file beyond the bound is refused without being read whole."""
        self.assertRaises(TokenFileError, read_tokens, self._file("A" * (MAX_FILE_BYTES + 10)))


class TokensTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = self.mktemp()
        self._write("AAAAAAAAAAAAAAAA old\n")
        self.tokens = Tokens(self.path)
        self.tokens.load()

    def _write(self, text: str) -> None:
        with open(self.path + ".new", "w") as f:
            f.write(text)
        os.chmod(self.path + ".new", 0o600)
        os.replace(self.path + ".new", self.path)

    def test_identify(self) -> None:
        """A valid Bearer token is identified by its label; anything else by nothing."""
        self.assertEqual(self.tokens.identify(b"Bearer AAAAAAAAAAAAAAAA"), "old")
        for header in (None, b"", b"Bearer", b"Basic AAAAAAAAAAAAAAAA", b"Bearer AAAAAAAAAAAAAAAB"):
            self.assertIsNone(self.tokens.identify(header), header)

    def test_rotation(self) -> None:
        """After a reload both tokens are valid while both are listed; a removed one is refused."""
        self._write("AAAAAAAAAAAAAAAA old\nBBBBBBBBBBBBBBBB new\n")
        self.tokens.reload()
        self.assertEqual(self.tokens.identify(b"Bearer AAAAAAAAAAAAAAAA"), "old")
        self.assertEqual(self.tokens.identify(b"Bearer BBBBBBBBBBBBBBBB"), "new")
        self._write("BBBBBBBBBBBBBBBB new\n")
        self.tokens.reload()
        self.assertIsNone(self.tokens.identify(b"Bearer AAAAAAAAAAAAAAAA"))
        self.assertEqual(self.tokens.identify(b"Bearer BBBBBBBBBBBBBBBB"), "new")

    def test_broken_file_fails_closed(self) -> None:
        """A token file that no longer parses, or is gone, leaves no token valid (never the old ones)."""
        self._write("short\n")
        self.tokens.reload()
        self.assertIsNone(self.tokens.identify(b"Bearer AAAAAAAAAAAAAAAA"))
        self._write("AAAAAAAAAAAAAAAA old\n")
        self.tokens.reload()
        self.assertEqual(self.tokens.identify(b"Bearer AAAAAAAAAAAAAAAA"), "old")
        os.unlink(self.path)
        self.tokens.reload()
        self.assertIsNone(self.tokens.identify(b"Bearer AAAAAAAAAAAAAAAA"))

    def test_load_refuses(self) -> None:
        """The first load of an unusable file raises: the daemon does not start."""
        os.unlink(self.path)
        self.assertRaises(TokenFileError, Tokens(self.path).load)


class WatchTests(SynchronousTestCase):
    def test_change_reloads(self) -> None:
        """The watch reloads the tokens once the file changed, at its next look, and not before."""
        path = self.mktemp()
        reads: list[str] = []

        def read(p: str) -> tuple[Token, ...]:
            reads.append(p)
            return (Token(b"A" * 16, "a"),)

        with open(path, "w") as f:
            f.write("x")
        tokens = Tokens(path, read)
        clock = Clock()
        watch = TokenWatch(clock, tokens, signals=False)
        watch.startService()
        self.addCleanup(watch.stopService)
        clock.advance(5)
        self.assertEqual(reads, [])
        with open(path, "w") as f:
            f.write("xy")
        clock.advance(1)
        self.assertEqual(reads, [path])
        clock.advance(5)
        self.assertEqual(reads, [path])

    def test_hangup_reloads(self) -> None:
        """SIGHUP asks the reactor for a reload; the previous handler is back after stop."""
        path = self.mktemp()
        reads: list[str] = []
        tokens = Tokens(path, lambda p: reads.append(p) or (Token(b"A" * 16, "a"),))
        reactor = _ThreadlessReactor()
        before = signal.getsignal(signal.SIGHUP)
        watch = TokenWatch(reactor, tokens)
        watch.startService()
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            self.assertEqual(len(reactor.from_thread), 1)
            reactor.from_thread[0]()
            self.assertEqual(reads, [path])
        finally:
            watch.stopService()
        self.assertEqual(signal.getsignal(signal.SIGHUP), before)


class _ThreadlessReactor(Clock):
    """A clock whose callFromThread only records the call."""

    def __init__(self) -> None:
        super().__init__()
        self.from_thread: list[Callable[[], object]] = []

    def callFromThread(self, call: Callable[[], object]) -> None:
        self.from_thread.append(call)
