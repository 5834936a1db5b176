# -*- test-case-name: tests.network.test_claims -*-
"""
Tests for :mod:`vmservice.network.claims`: claim files, their locks, stale
files, refusals (overlap, same state directory) within one process.  Claims
against another process, and the directory lock that makes a claim wait,
are in :mod:`tests.integration.network.test_claims`.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from ipaddress import IPv4Network

from twisted.trial.unittest import SynchronousTestCase

from tests.network.claims_case import A, B, NET, ClaimsTestCase, claimFiles
from vmservice.network.claims import Claim, RangeClaims, RangeTaken


def _isLocked(path: str) -> bool:
    """
    Whether some open file description other than a new one holds the flock
    of ``path``.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class FlockTests(SynchronousTestCase):
    """
    The kernel behaviour the claims rely on.
    """

    def test_secondOpenInSameProcessIsRefused(self) -> None:
        """
        ``flock`` locks belong to the open file description: a second
        ``open()`` + ``flock(LOCK_EX | LOCK_NB)`` by the same process fails
        with ``EWOULDBLOCK`` while the first descriptor holds the lock, and
        succeeds once it is closed.
        """
        path = self.mktemp()
        first = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.addCleanup(os.close, first)
        fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = os.open(path, os.O_RDONLY)
        try:
            error = self.assertRaises(BlockingIOError, fcntl.flock, second, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.assertIn(error.errno, (errno.EWOULDBLOCK, errno.EAGAIN))
            fcntl.flock(first, fcntl.LOCK_UN)
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(second)


class ClaimTests(ClaimsTestCase):
    """
    Claiming and releasing without competition.
    """

    def test_claimWritesLockedFiles(self) -> None:
        """
        Each range gets a file ``<address>_<prefix>.claim`` holding the JSON
        claim, locked for as long as the claim is held.
        """
        self.claims().claim([NET, IPv4Network("192.168.137.0/24")], A)
        self.assertEqual(claimFiles(self.directory), ["10.77.0.0_22.claim", "192.168.137.0_24.claim"])
        path = os.path.join(self.directory, "10.77.0.0_22.claim")
        with open(path) as stream:
            self.assertEqual(json.load(stream), {"range": "10.77.0.0/22", "owner": A, "pid": os.getpid()})
        self.assertTrue(_isLocked(path))
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o644)

    def test_heldIncludesOurs(self) -> None:
        """
        ``held()`` lists the live claims ordered by range, this object's own
        included.
        """
        claims = self.claims()
        claims.claim([IPv4Network("192.168.137.0/24"), NET], A)
        self.assertEqual(
            claims.held(),
            [Claim(NET, A, os.getpid()), Claim(IPv4Network("192.168.137.0/24"), A, os.getpid())],
        )

    def test_heldWithoutDirectory(self) -> None:
        """
        Before any claim there is no directory and nothing is held; asking
        does not create the directory.
        """
        self.assertEqual(RangeClaims(self.directory).held(), [])
        self.assertFalse(os.path.exists(self.directory))

    def test_release(self) -> None:
        """
        ``release()`` removes the files; nothing is held afterwards, and
        releasing again is harmless.
        """
        claims = self.claims()
        claims.claim([NET], A)
        claims.release()
        self.assertEqual(claimFiles(self.directory), [])
        self.assertEqual(claims.held(), [])
        claims.release()

    def test_claimAgainAfterRelease(self) -> None:
        """
        The same object may claim again once it has released.
        """
        claims = self.claims()
        claims.claim([NET], A)
        claims.release()
        claims.claim([IPv4Network("10.78.0.0/22")], A)
        self.assertEqual(claimFiles(self.directory), ["10.78.0.0_22.claim"])

    def test_claimTwice(self) -> None:
        """
        An object that holds claims refuses to claim more; its claims stay.
        """
        claims = self.claims()
        claims.claim([NET], A)
        self.assertRaises(RuntimeError, claims.claim, [IPv4Network("10.78.0.0/22")], A)
        self.assertEqual(claimFiles(self.directory), ["10.77.0.0_22.claim"])

    def test_repeatedRange(self) -> None:
        """
        A range given twice is claimed once.
        """
        claims = self.claims()
        claims.claim([NET, NET], A)
        self.assertEqual(claims.held(), [Claim(NET, A, os.getpid())])

    def test_emptyRanges(self) -> None:
        """
        Claiming no range does nothing, not even create the directory.
        """
        self.claims().claim([], A)
        self.assertFalse(os.path.exists(self.directory))

    def test_ownerMadeAbsolute(self) -> None:
        """
        The owner is recorded as an absolute path.
        """
        claims = self.claims()
        claims.claim([NET], "state")
        self.assertEqual(claims.held(), [Claim(NET, os.path.abspath("state"), os.getpid())])

    def test_directoryMode(self) -> None:
        """
        The directory and its missing parents are created with mode 0755,
        whatever the umask.
        """
        parent = os.path.dirname(self.directory)
        old = os.umask(0o077)
        try:
            self.claims().claim([NET], A)
        finally:
            os.umask(old)
        for directory in (parent, self.directory):
            self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o755, directory)
        path = os.path.join(self.directory, "10.77.0.0_22.claim")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o644)


class CompetitionTests(ClaimsTestCase):
    """
    Two daemons' claims within one process: each :class:`RangeClaims` opens
    its own files, so their locks conflict as they would between processes.
    """

    def assertRefused(self, ours: str, theirs: str) -> RangeTaken:
        """
        ``B`` cannot claim ``ours`` (nor anything else with it) while ``A``
        holds ``theirs``.
        """
        self.claims().claim([IPv4Network(theirs)], A)
        second = self.claims()
        error = self.assertRaises(
            RangeTaken, second.claim, [IPv4Network("172.16.0.0/24"), IPv4Network(ours)], B
        )
        self.assertEqual(error.claim, Claim(IPv4Network(theirs), A, os.getpid()))
        self.assertEqual(error.range, IPv4Network(ours))
        self.assertEqual(claimFiles(self.directory), [theirs.replace("/", "_") + ".claim"])
        return error

    def test_overlapRefused(self) -> None:
        """
        A range inside another daemon's range is refused with a one-line
        message naming both ranges, the other state directory and pid.
        """
        error = self.assertRefused("10.77.2.0/24", "10.77.0.0/22")
        self.assertEqual(
            str(error),
            f"network range 10.77.2.0/24 overlaps 10.77.0.0/22 claimed by the vmservice daemon "
            f"of {A} (pid {os.getpid()})",
        )

    def test_supersetRefused(self) -> None:
        """
        A range containing another daemon's range is refused.
        """
        error = self.assertRefused("10.0.0.0/8", "10.77.0.0/22")
        self.assertIn("network range 10.0.0.0/8 overlaps 10.77.0.0/22", str(error))

    def test_sameRangeRefused(self) -> None:
        """
        The very range another daemon claims is refused.
        """
        error = self.assertRefused("10.77.0.0/22", "10.77.0.0/22")
        self.assertEqual(
            str(error),
            f"network range 10.77.0.0/22 is already claimed by the vmservice daemon of {A} "
            f"(pid {os.getpid()})",
        )

    def test_disjointRangesBothFine(self) -> None:
        """
        Adjacent, non-overlapping ranges are claimed by both daemons.
        """
        self.claims().claim([IPv4Network("10.77.0.0/24")], A)
        second = self.claims()
        second.claim([IPv4Network("10.77.1.0/24")], B)
        self.assertEqual(
            second.held(),
            [
                Claim(IPv4Network("10.77.0.0/24"), A, os.getpid()),
                Claim(IPv4Network("10.77.1.0/24"), B, os.getpid()),
            ],
        )

    def test_sameOwnerRefused(self) -> None:
        """
        A second daemon on the same state directory is refused, whatever its
        ranges, with a message saying which pid uses the directory.
        """
        self.claims().claim([NET], A)
        error = self.assertRaises(RangeTaken, self.claims().claim, [IPv4Network("10.78.0.0/22")], A)
        self.assertIsNone(error.range)
        self.assertEqual(
            str(error),
            f"state directory {A} is in use by the vmservice daemon with pid {os.getpid()} "
            "(which claims network range 10.77.0.0/22)",
        )

    def test_releaseLetsAnotherClaim(self) -> None:
        """
        Once the first daemon releases, the second claims the range.
        """
        first = self.claims()
        first.claim([NET], A)
        first.release()
        second = self.claims()
        second.claim([IPv4Network("10.77.2.0/24")], B)
        self.assertEqual(second.held(), [Claim(IPv4Network("10.77.2.0/24"), B, os.getpid())])

    def test_unreadableLiveClaim(self) -> None:
        """
        A locked claim file whose content is not a claim still claims the
        range its name spells.
        """
        os.makedirs(self.directory)
        path = os.path.join(self.directory, "10.77.0.0_22.claim")
        with open(path, "w") as stream:
            stream.write("{not json")
        fd = os.open(path, os.O_RDONLY)
        self.addCleanup(os.close, fd)
        fcntl.flock(fd, fcntl.LOCK_EX)
        error = self.assertRaises(RangeTaken, self.claims().claim, [IPv4Network("10.77.1.0/24")], B)
        self.assertEqual(
            str(error),
            "network range 10.77.1.0/24 overlaps 10.77.0.0/22 claimed by another vmservice daemon "
            "(its claim file is unreadable)",
        )


class StaleTests(ClaimsTestCase):
    """
    Files of daemons that are gone.
    """

    def test_staleFileReplaced(self) -> None:
        """
        An unlocked file for our range is stale: it is replaced by ours.
        """
        path = self.writeStale("10.77.0.0/22")
        self.claims().claim([NET], A)
        with open(path) as stream:
            self.assertEqual(json.load(stream), {"range": "10.77.0.0/22", "owner": A, "pid": os.getpid()})
        self.assertTrue(_isLocked(path))

    def test_staleOverlapIgnored(self) -> None:
        """
        A stale file overlapping our range, or naming our state directory,
        does not refuse the claim and is removed.
        """
        self.writeStale("10.77.2.0/24")
        self.writeStale("10.99.0.0/24", owner=A)
        self.claims().claim([NET], A)
        self.assertEqual(claimFiles(self.directory), ["10.77.0.0_22.claim"])

    def test_heldSkipsStale(self) -> None:
        """
        ``held()`` leaves stale files out, and in place.
        """
        self.writeStale("10.77.0.0/22")
        self.assertEqual(RangeClaims(self.directory).held(), [])
        self.assertEqual(claimFiles(self.directory), ["10.77.0.0_22.claim"])
