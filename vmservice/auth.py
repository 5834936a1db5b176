# -*- test-case-name: tests.test_auth -*-
"""
Bearer-token authentication of the API.

The tokens live in one file, ``<state_dir>/auth/token`` unless
``api.auth.token_file`` names another: one token per line, optionally
followed by a label (``TOKEN [LABEL]``); blank lines and lines starting with
``#`` are ignored.  At the first start with authentication on and no such
file, the daemon makes it with one new token (directory 0700, file 0600).

Several tokens are valid at once, so a token is rotated without a restart:
add the new one, move the clients over, remove the old one.  The daemon
reads the file again on ``SIGHUP`` and when it changes (a ``stat`` once a
second); a removed token is refused from then on.  A file that cannot be
read, is not safe (writable by others, owned by another user) or does not
parse leaves *no* token valid until it is fixed: a mistake never keeps a
token alive that the operator meant to remove.

A request is matched against every token in constant time per token; what
identifies the caller in the audit log is the token's label, or a short
digest of it (``sha256:`` and 12 hex digits), never the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import signal
import stat
from types import FrameType
from typing import Any, Callable

import attrs
from twisted.application.service import Service
from twisted.internet.interfaces import IReactorThreads, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from .durable import write_atomic

log = Logger()

#: Bytes of entropy in a new token (encoded as URL-safe base64: 43 characters).
TOKEN_BYTES = 32

#: The shortest token accepted in a token file.
MIN_TOKEN_LENGTH = 16

#: The most bytes read of a token file, and the most tokens in it.
MAX_FILE_BYTES = 64 * 1024
MAX_TOKENS = 1000

#: Seconds between two looks at the token file.
WATCH_INTERVAL = 1.0

#: A token: printable ASCII without spaces; a label: a short name.
_TOKEN = re.compile(r"[\x21-\x7e]+")
_LABEL = re.compile(r"[A-Za-z0-9._@:+-]{1,64}")


class TokenFileError(Exception):
    """A token file that cannot be used; the message says why."""


@attrs.frozen
class Token:
    """
    One valid token.

    :ivar secret: what a client presents.
    :ivar identity: what names the token in logs: its label, or a digest.
    """

    secret: bytes = attrs.field(repr=False)
    identity: str


def token_path(state_dir: str) -> str:
    """Where the token file of a daemon with ``state_dir`` lives by default."""
    return os.path.join(state_dir, "auth", "token")


def digest_identity(secret: bytes) -> str:
    """What names an unlabelled token: enough of its digest to tell tokens apart, nothing to guess it by."""
    return "sha256:" + hashlib.sha256(secret).hexdigest()[:12]


def parse_tokens(text: str, source: str) -> tuple[Token, ...]:
    """
    The tokens of a token file's ``text`` (pure).

    :param source: the file's name, for messages.
    :raise TokenFileError: a line that is not ``TOKEN [LABEL]``, a token
        shorter than :data:`MIN_TOKEN_LENGTH`, a token or label given twice,
        more than :data:`MAX_TOKENS` tokens, or none at all.
    """
    tokens: list[Token] = []
    seen: set[bytes] = set()
    labels: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) > 2 or not _TOKEN.fullmatch(words[0]) or (len(words) == 2 and not _LABEL.fullmatch(words[1])):
            raise TokenFileError(f"{source}:{number}: expected TOKEN or TOKEN LABEL (label: {_LABEL.pattern})")
        secret = words[0].encode("ascii")
        if len(secret) < MIN_TOKEN_LENGTH:
            raise TokenFileError(f"{source}:{number}: a token must have at least {MIN_TOKEN_LENGTH} characters")
        identity = words[1] if len(words) == 2 else digest_identity(secret)
        if secret in seen or identity in labels:
            raise TokenFileError(f"{source}:{number}: the same token or label is given twice")
        seen.add(secret)
        labels.add(identity)
        tokens.append(Token(secret, identity))
        if len(tokens) > MAX_TOKENS:
            raise TokenFileError(f"{source}: more than {MAX_TOKENS} tokens")
    if not tokens:
        raise TokenFileError(f"{source}: no token in the file")
    return tuple(tokens)


def read_tokens(path: str) -> tuple[Token, ...]:
    """
    Read the token file ``path``.

    The file (links followed: an operator may link a mounted secret) must
    be a regular file owned by the daemon's user or root and writable by
    nobody else; a file others may read is used, with a warning.

    :raise TokenFileError: it cannot be read, is not safe, or does not parse.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        raise TokenFileError(f"cannot open the token file {path}: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"the token file {path} is not a regular file")
        if info.st_uid not in (0, os.geteuid()):
            raise TokenFileError(f"the token file {path} belongs to uid {info.st_uid}, not to the daemon's user")
        if info.st_mode & 0o022:
            raise TokenFileError(f"the token file {path} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o})")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError as error:
        raise TokenFileError(f"cannot read the token file {path}: {error.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise TokenFileError(f"the token file {path} is larger than {MAX_FILE_BYTES} bytes")
    if info.st_mode & 0o044:
        log.warn("the token file {path} is readable by other users: make it 0600", path=path)
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise TokenFileError(f"the token file {path} is not ASCII text") from None
    return parse_tokens(text, path)


def create_token_file(path: str) -> None:
    """
    Make the token file ``path`` with one new token, its directory 0700 and
    the file 0600, unless it exists.
    """
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if os.path.lexists(path):
        return
    write_atomic(path, secrets.token_urlsafe(TOKEN_BYTES).encode() + b"\n", mode=0o600)


def load_or_create_token(state_dir: str) -> str:
    """
    Read the first API token of the daemon with ``state_dir``, creating the
    token file (and its directory) on first use.

    Permissions are tightened to 0700/0600 even when the files already exist.
    """
    path = token_path(state_dir)
    create_token_file(path)
    os.chmod(os.path.dirname(path), 0o700)
    os.chmod(path, 0o600)
    return read_tokens(path)[0].secret.decode("ascii")


def bearer_matches(header: bytes | None, token: str) -> bool:
    """
    Whether an ``Authorization`` header carries ``token`` as a Bearer token.
    The comparison takes the same time wherever the first difference is.
    """
    presented = _presented(header)
    return presented is not None and hmac.compare_digest(presented, token.encode())


def _presented(header: bytes | None) -> bytes | None:
    """The token an ``Authorization: Bearer`` header presents, or ``None``."""
    if not header:
        return None
    scheme, _, presented = header.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return presented.strip()


class Tokens:
    """
    The tokens valid now, read from one token file.

    :param path: the token file.
    :param read: how the file is read (:func:`read_tokens`; tests pass fakes).
    """

    def __init__(self, path: str, read: Callable[[str], tuple[Token, ...]] = read_tokens) -> None:
        self.path = path
        self._read = read
        self._tokens: tuple[Token, ...] = ()

    @classmethod
    def fixed(cls, *secrets: str) -> Tokens:
        """Tokens no file backs (a daemon's tests, or an embedding that holds its own)."""
        tokens = tuple(Token(secret.encode(), digest_identity(secret.encode())) for secret in secrets)
        made = cls("", lambda path: tokens)
        made.load()
        return made

    def load(self) -> None:
        """
        Read the file for the first time (at start).

        :raise TokenFileError: it cannot be used: the daemon does not start.
        """
        self._tokens = self._read(self.path)

    def reload(self) -> None:
        """
        Read the file again.  A file that cannot be used leaves no token
        valid (and says so in the log) until it is fixed.
        """
        try:
            tokens = self._read(self.path)
        except TokenFileError as error:
            if self._tokens:
                log.error("{error}: no API token is valid until the token file is fixed", error=str(error))
            self._tokens = ()
            return
        before = {token.identity for token in self._tokens}
        after = {token.identity for token in tokens}
        self._tokens = tokens
        if before != after:
            log.info(
                "API tokens reloaded from {path}: {count} valid (added: {added}; removed: {removed})",
                path=self.path, count=len(tokens), added=", ".join(sorted(after - before)) or "none",
                removed=", ".join(sorted(before - after)) or "none",
            )

    def identify(self, header: bytes | None) -> str | None:
        """
        The identity of the token an ``Authorization`` header presents, or
        ``None`` when it presents none that is valid.  Every token is
        compared, each in constant time.
        """
        presented = _presented(header)
        if presented is None:
            return None
        found: str | None = None
        for token in self._tokens:
            if hmac.compare_digest(presented, token.secret):
                found = token.identity
        return found


def _file_state(path: str) -> tuple[int, ...] | None:
    """What changes when a file is replaced or written: its device, inode, size and times."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode, info.st_uid)


class IWatchReactor(IReactorTime, IReactorThreads):
    """What :class:`TokenWatch` needs of its reactor: timed looks, and calls from a signal handler."""


class TokenWatch(Service):
    """
    Reloads :class:`Tokens` on ``SIGHUP`` and when the token file changes
    (looked at every :data:`WATCH_INTERVAL` seconds).

    :param reactor: runs the looks, and takes the signal's reload into its
        thread (a signal handler only asks for it).
    :param tokens: what is reloaded.
    :param signals: whether to take ``SIGHUP`` (tests say no).
    """

    def __init__(self, reactor: IWatchReactor, tokens: Tokens, signals: bool = True) -> None:
        self._reactor = reactor
        self._tokens = tokens
        self._signals = signals
        self._state = _file_state(tokens.path)
        self._loop = LoopingCall(self._look)
        self._loop.clock = reactor
        self._previous: Any = None

    def startService(self) -> None:
        super().startService()  # type: ignore[no-untyped-call]  # Twisted's Service is not annotated
        self._state = _file_state(self._tokens.path)
        self._loop.start(WATCH_INTERVAL, now=False)
        if self._signals:
            self._previous = signal.signal(signal.SIGHUP, self._hangup)

    def stopService(self) -> None:
        if self._loop.running:
            self._loop.stop()
        if self._signals:
            signal.signal(signal.SIGHUP, self._previous if self._previous is not None else signal.SIG_DFL)
        super().stopService()  # type: ignore[no-untyped-call]  # Twisted's Service is not annotated

    def _hangup(self, number: int, frame: FrameType | None) -> None:
        self._reactor.callFromThread(self.reload)

    def reload(self) -> None:
        """Read the token file again now."""
        self._state = _file_state(self._tokens.path)
        self._tokens.reload()

    def _look(self) -> None:
        if _file_state(self._tokens.path) != self._state:
            self.reload()


__all__ = [
    "IWatchReactor",
    "MIN_TOKEN_LENGTH",
    "Token",
    "TokenFileError",
    "TokenWatch",
    "Tokens",
    "bearer_matches",
    "create_token_file",
    "digest_identity",
    "load_or_create_token",
    "parse_tokens",
    "read_tokens",
    "token_path",
]
