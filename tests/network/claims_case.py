"""
Range claims in a test's own directory (:class:`ClaimsTestCase`), with the owners (:data:`A`,
:data:`B`) and the range (:data:`NET`) the tests claim, and the claim files found in a directory
(:func:`claimFiles`).
"""

from __future__ import annotations

import json
import os
from ipaddress import IPv4Network

from twisted.trial.unittest import SynchronousTestCase

from vmservice.network.claims import RangeClaims

A = "/var/lib/vmservice-a"
B = "/var/lib/vmservice-b"
NET = IPv4Network("10.77.0.0/22")


def claimFiles(directory: str) -> list[str]:
    """The names of the claim files in ``directory``, sorted."""
    return sorted(name for name in os.listdir(directory) if name.endswith(".claim"))


class ClaimsTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = os.path.join(self.mktemp(), "ranges")

    def claims(self) -> RangeClaims:
        """
        A new :class:`RangeClaims` on the test's directory, released at the
        end of the test.
        """
        claims = RangeClaims(self.directory)
        self.addCleanup(claims.release)
        return claims

    def writeStale(self, network: str, owner: str = B, pid: int = 999999) -> str:
        """
        A claim file written by hand and not locked, as a daemon that died
        leaves it.
        """
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, network.replace("/", "_") + ".claim")
        with open(path, "w") as stream:
            json.dump({"range": network, "owner": owner, "pid": pid}, stream)
        return path
