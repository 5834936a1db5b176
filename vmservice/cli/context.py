# -*- test-case-name: tests.cli.test_main -*-
"""
What every ``vmctl`` command runs with: its reactor (:class:`IVmctlReactor`),
streams and stdin (:class:`Context`), and :class:`Failed`, a failure already
worded for the user; the shapes of a command's ``run`` (:data:`Run`, against
a daemon) and of one that runs on this machine alone (:data:`Local`).
"""

from __future__ import annotations

import argparse
from typing import IO, Awaitable, Callable, TextIO

from attrs import frozen

from ..client import Client, IClientReactor
from .copying import ICopyReactor

__all__ = ["Context", "Failed", "IVmctlReactor", "Local", "Run"]


class Failed(Exception):
    """A command failed for a reason already worded for the user."""


class IVmctlReactor(IClientReactor, ICopyReactor):
    """
    What ``vmctl`` needs of its reactor: the client's (see
    :class:`~vmservice.client.IClientReactor`) and ``vmctl cp``'s (see
    :class:`~vmservice.cli.copying.ICopyReactor`).

    Every reactor Twisted installs provides all of these; this interface only
    names them together for the type checker (no reactor declares it).
    """


@frozen
class Context:
    """
    What a command runs with besides its options.

    :ivar reactor: the reactor (for clocks, pipes and threads).
    :ivar out: where results go.
    :ivar err: where errors and progress go.
    :ivar stdin: the bytes ``vmctl exec --stdin`` sends, or ``None``.
    """

    reactor: IVmctlReactor
    out: TextIO
    err: TextIO
    stdin: IO[bytes] | None


#: A command against a daemon: its client, its options and its context in, its exit status out.
Run = Callable[[Client, argparse.Namespace, Context], Awaitable[int]]

#: A command run on this machine alone (no daemon): its options and where its output goes in, its exit status out.
Local = Callable[[argparse.Namespace, TextIO], int]
