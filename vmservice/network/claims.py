# -*- test-case-name: tests.network.test_claims,tests.integration.network.test_claims -*-
"""
Host-wide claims of address ranges, so that two vmservice daemons on one host
never hand out addresses from overlapping ranges.

Each daemon writes one small file per range it uses into a directory shared
by all daemons of the host (``/run/vmservice/ranges`` by default)::

    10.77.0.0_22.claim     {"range": "10.77.0.0/22", "owner": "/var/lib/vmservice", "pid": 1234}
    .lock                  empty; flock()ed while claims are checked and written

and holds an exclusive :func:`fcntl.flock` on each of its files for as long as
it runs. The lock, not the file, is the claim: the kernel drops it when the
daemon exits, however it exits, so a claim file whose lock can be taken is
*stale* and is removed by the next daemon that looks. Nothing depends on the
pid written in the file (it is only reported), so pid reuse and pid
namespaces do no harm.

``flock`` locks belong to an open file description, not to a process: a
second ``open()`` + ``flock()`` of a file that another descriptor of the
*same* process has locked fails with ``EWOULDBLOCK`` just as it does across
processes. So two :class:`RangeClaims` in one process (as in tests) see each
other's claims. The descriptors are close-on-exec (Python's default), so
QEMU and other programs the daemon starts never inherit, and never keep
alive, a claim.

Checking and writing happen under a flock of ``.lock``, so two daemons
starting at once are serialized and a file is never seen half written. That
lock is taken with a blocking ``flock`` and held only for a directory scan;
the daemon claims its ranges once at start-up, before the reactor runs.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from ipaddress import IPv4Network

import attrs

__all__ = ["DEFAULT_DIRECTORY", "Claim", "RangeClaims", "RangeTaken"]

#: Where the daemons of a host keep their claim files.
DEFAULT_DIRECTORY = "/run/vmservice/ranges"

_SUFFIX = ".claim"
_LOCK_NAME = ".lock"


@attrs.frozen
class Claim:
    """
    What a claim file says: ``range`` is used by the daemon whose state
    directory is ``owner`` and whose process is ``pid``.

    :ivar range: The claimed addresses.
    :ivar owner: The claiming daemon's state directory, an absolute path; the
        empty string when a live claim file could not be read (its range is
        then taken from the file name).
    :ivar pid: The claiming daemon's process id (0 when unreadable).
    """

    range: IPv4Network
    owner: str
    pid: int


class RangeTaken(Exception):
    """
    Another running daemon claims an overlapping range, or runs on the same
    state directory.

    ``str()`` is one line naming both ranges, the other daemon's state
    directory and pid, e.g. ``network range 10.77.0.0/22 overlaps
    10.77.2.0/24 claimed by the vmservice daemon of /var/lib/vmservice-b (pid
    1234)``.

    :ivar range: Our range that overlaps, or ``None`` when the refusal is
        because the other daemon has our state directory (then its ranges do
        not matter).
    :ivar claim: The other daemon's claim.
    """

    def __init__(self, claim: Claim, range: IPv4Network | None = None) -> None:
        super().__init__(claim, range)
        self.claim = claim
        self.range = range

    def __str__(self) -> str:
        theirs = self.claim
        if self.range is None:
            return (
                f"state directory {theirs.owner} is in use by the vmservice daemon with pid "
                f"{theirs.pid} (which claims network range {theirs.range})"
            )
        if self.range == theirs.range:
            conflict = f"network range {self.range} is already claimed"
        else:
            conflict = f"network range {self.range} overlaps {theirs.range} claimed"
        if not theirs.owner:
            return f"{conflict} by another vmservice daemon (its claim file is unreadable)"
        return f"{conflict} by the vmservice daemon of {theirs.owner} (pid {theirs.pid})"


@attrs.frozen
class _Held:
    """
    One of our claims: the record, its file and the open, locked descriptor.
    """

    claim: Claim
    path: str
    fd: int


def _file_name(network: IPv4Network) -> str:
    """
    ``10.77.0.0/22`` -> ``10.77.0.0_22.claim``.
    """
    return f"{network.network_address}_{network.prefixlen}{_SUFFIX}"


def _range_of_file_name(name: str) -> IPv4Network | None:
    """
    The range a claim file's name spells, or ``None`` if it spells none.
    """
    address, _, prefix = name[: -len(_SUFFIX)].rpartition("_")
    try:
        return IPv4Network(f"{address}/{prefix}")
    except ValueError:
        return None


def _make_directories(path: str) -> None:
    """
    Create ``path`` and its missing parents with mode 0755 whatever the
    umask. Directories that already exist are left as they are.
    """
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:  # pragma: no cover - "/" always exists
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o755)
        except FileExistsError:
            continue  # another daemon was quicker; its mode is its own
        os.chmod(directory, 0o755)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(data: bytes, network: IPv4Network) -> Claim:
    """
    The claim in a live file's content; the file name's ``network`` with no
    owner when the content is not a claim (which a live daemon never leaves:
    it writes under the directory lock, which readers hold too).
    """
    try:
        document = json.loads(data)
        return Claim(
            range=IPv4Network(document["range"]),
            owner=str(document["owner"]),
            pid=int(document["pid"]),
        )
    except (ValueError, KeyError, TypeError):
        return Claim(range=network, owner="", pid=0)


class RangeClaims:
    """
    The ranges one daemon claims on this host.

    :param directory: Where the daemons of the host keep their claim files;
        created (mode 0755, parents too) on the first :meth:`claim`.
    """

    def __init__(self, directory: str = DEFAULT_DIRECTORY) -> None:
        self.directory = directory
        self._held: list[_Held] = []

    def claim(self, ranges: Sequence[IPv4Network], owner: str) -> None:
        """
        Claim ``ranges`` for the daemon whose state directory is ``owner``,
        until :meth:`release` or the end of this process.

        Under the directory lock, every claim file is probed: stale ones are
        removed; live ones (ours from other :class:`RangeClaims` included)
        refuse the claim if they have our ``owner`` or a range overlapping one
        of ``ranges``. Then one file per range is written and locked. A
        refused claim claims nothing.

        An empty ``ranges`` claims nothing and checks nothing (not even the
        state directory). Repeated ranges are claimed once.

        :param ranges: The daemon's address ranges.
        :param owner: The daemon's state directory; made absolute.
        :raises RangeTaken: If another live daemon claims an overlapping range
            or has the same state directory.
        :raises RuntimeError: If this object already holds claims.
        :raises OSError: If the directory or a file cannot be made.
        """
        if self._held:
            raise RuntimeError("these ranges are already claimed; release() them first")
        wanted = list(dict.fromkeys(ranges))
        if not wanted:
            return
        owner = os.path.abspath(owner)
        _make_directories(self.directory)
        with self._directory_locked(create=True):
            live = list(self._live_claims(remove_stale=True))
            for theirs in live:
                if theirs.owner == owner:
                    raise RangeTaken(theirs)
            for ours in wanted:
                for theirs in live:
                    if ours.overlaps(theirs.range):
                        raise RangeTaken(theirs, ours)
            try:
                for ours in wanted:
                    self._held.append(self._write(Claim(range=ours, owner=owner, pid=os.getpid())))
            except BaseException:
                self.release()
                raise

    def release(self) -> None:
        """
        Give up every claim of this object: each file is removed while still
        locked (so that no other daemon finds it unlocked and races to remove
        it too), then unlocked and closed. Releasing nothing is fine.
        """
        held, self._held = self._held, []
        for record in held:
            try:
                os.unlink(record.path)
            except FileNotFoundError:
                pass
            finally:
                fcntl.flock(record.fd, fcntl.LOCK_UN)
                os.close(record.fd)

    def held(self) -> list[Claim]:
        """
        The claims of every live daemon on this host, ordered by range.

        Ours are included: this object's own and those of other
        :class:`RangeClaims` in this process. Stale files are skipped but not
        removed (that is :meth:`claim`'s job), so this only reads.
        """
        if not os.path.isdir(self.directory):
            return []
        with self._directory_locked(create=False):
            return sorted(self._live_claims(remove_stale=False), key=lambda claim: claim.range)

    @contextmanager
    def _directory_locked(self, create: bool) -> Iterator[None]:
        """
        Hold the flock of ``<directory>/.lock``, waiting for it if needed.
        """
        flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        path = os.path.join(self.directory, _LOCK_NAME)
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:
            # held() before any claim: nobody can be writing a claim file.
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _live_claims(self, remove_stale: bool) -> Iterator[Claim]:
        """
        Probe every claim file of the directory; yield those whose lock is
        held, and forget (or remove, if ``remove_stale``) the others. Call
        with the directory locked.
        """
        for name in sorted(os.listdir(self.directory)):
            if name.startswith(".") or not name.endswith(_SUFFIX):
                continue
            network = _range_of_file_name(name)
            if network is None:
                continue  # not a file of ours
            path = os.path.join(self.directory, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # released meanwhile
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    yield _parse(_read_all(fd), network)
                    continue
                if remove_stale and os.fstat(fd).st_nlink:
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
            finally:
                os.close(fd)

    def _write(self, claim: Claim) -> _Held:
        """
        Create, lock and fill the file of ``claim``. Call with the directory
        locked, after stale files were removed.
        """
        path = os.path.join(self.directory, _file_name(claim.range))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.fchmod(fd, 0o644)
            document = {"range": str(claim.range), "owner": claim.owner, "pid": claim.pid}
            os.write(fd, json.dumps(document).encode("utf-8") + b"\n")
        except BaseException:
            os.unlink(path)
            os.close(fd)
            raise
        return _Held(claim=claim, path=path, fd=fd)
